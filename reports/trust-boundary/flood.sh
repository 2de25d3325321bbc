#!/usr/bin/env bash
# Issue 21's flood figures: one tick under mallory's floods, as root, on a real state
# directory with two fake GPUs. Prints a Markdown table; `flood.md` beside this script is
# its output on the machine it names.
#
#   sudo reports/trust-boundary/flood.sh [--carma target/release/carma] [--files 1000000]
#
# Mallory is uid 40002 and alice uid 40001 (numeric uids: the tick sees only owners);
# alice's commands run through setpriv. Each tick is timed with /usr/bin/time (wall seconds
# and peak RSS). Nothing here is asserted: the numbers are the report.
set -euo pipefail
carma=target/release/carma
files=1000000
while [ $# -gt 0 ]; do
    case "$1" in
        --carma) carma=$2; shift 2 ;;
        --files) files=$2; shift 2 ;;
        *) echo "usage: $0 [--carma PATH] [--files N]" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "flood.sh: run as root (it plays two users with setpriv)" >&2; exit 2; }
carma=$(readlink -f "$carma")
[ -x "$carma" ] || { echo "flood.sh: no carma at $carma; build with cargo build --release" >&2; exit 2; }

work=$(mktemp -d /var/tmp/carma-flood.XXXXXX)
trap 'rm -rf "$work"' EXIT
home=$work/q
export CARMA_HOME=$home
cp "$carma" "$work/carma"; chmod 755 "$work" "$work/carma"
"$work/carma" init >/dev/null
chmod 755 "$home"
cat > "$work/gpus.json" <<'JSON'
[{"uuid": "GPU-f-0", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0},
 {"uuid": "GPU-f-1", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0}]
JSON
printf '[tick]\ngpus = "fake:%s"\n' "$work/gpus.json" > "$home/config.toml"
as_alice() { setpriv --reuid 40001 --regid 40001 --clear-groups env CARMA_HOME="$home" "$work/carma" "$@"; }
tick() { /usr/bin/time -f "%e %M" -o "$work/time" "$work/carma" tick >/dev/null 2>&1; read -r s kib < "$work/time"; echo "$s $((kib / 1024))"; }
journaled() { "$work/carma" events --task "$1" 2>/dev/null | grep -c Submitted || true; }

m=$home/spool/40002
mkdir -m 700 "$m"; chown 40002:40002 "$m"
"$work/carma" tick >/dev/null 2>&1

echo "| flood | tick wall s | tick peak RSS MiB | alice's task journaled after |"
echo "|---|---|---|---|"

# 1. A million requests for unknown tasks in mallory's folder.
python3 - "$m" "$files" <<'PY'
import os, sys
folder, n = sys.argv[1], int(sys.argv[2])
os.chdir(folder)
for i in range(n):
    fd = os.open(f"06h{i:013d}.cancel", os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
PY
chown -R 40002:40002 "$m"
alice=$(as_alice submit --parsable --mem 1GiB -- sleep 1)
read -r s mib < <(tick)
n=1; while [ "$(journaled "$alice")" = 0 ] && [ $n -lt 5 ]; do tick >/dev/null; n=$((n + 1)); done
echo "| $files request files in mallory's folder | $s | $mib | $n tick(s) |"
rm -rf "$m"; mkdir -m 700 "$m"; chown 40002:40002 "$m"

# 2. Ten spec files of 35 MB (sparse) in mallory's folder.
for i in 0 1 2 3 4 5 6 7 8 9; do truncate -s 35000000 "$m/06h9999999999$i.toml"; done
chown -R 40002:40002 "$m"
alice=$(as_alice submit --parsable --mem 1GiB -- sleep 1)
read -r s mib < <(tick)
n=1; while [ "$(journaled "$alice")" = 0 ] && [ $n -lt 5 ]; do tick >/dev/null; n=$((n + 1)); done
echo "| 10 × 35 MB spec files in mallory's folder | $s | $mib | $n tick(s) |"

# 3. A million junk files at the top of the spool (where only folders belong).
python3 - "$home/spool" "$files" <<'PY'
import os, sys
folder, n = sys.argv[1], int(sys.argv[2])
os.chdir(folder)
for i in range(n):
    fd = os.open(f"junk{i}", os.O_CREAT | os.O_WRONLY, 0o600)
    os.fchown(fd, 40002, 40002)
    os.close(fd)
PY
alice=$(as_alice submit --parsable --mem 1GiB -- sleep 1)
read -r s mib < <(tick)
n=1; while [ "$(journaled "$alice")" = 0 ] && [ $n -lt 5 ]; do tick >/dev/null; n=$((n + 1)); done
echo "| $files junk files at the top of spool/ (moved away in one rename) | $s | $mib | $n tick(s) |"
read -r s mib < <(tick)
echo "| the tick after that | $s | $mib | |"
