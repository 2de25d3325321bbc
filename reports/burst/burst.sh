#!/usr/bin/env bash
# One tick that finds N new spool files, for two carma binaries side by side, with `carma queue`
# run in a loop while each tick runs. Usage: burst.sh OLD_CARMA NEW_CARMA [N] [ROUNDS]
# Each round builds one state directory (4 fake 40 GiB GPUs), writes N spool files in the
# format both versions read (a bare spec file named <task-id>.toml, mode 0600; in the
# user's folder spool/<uid>/ for a carma with the trust boundary), copies it,
# and times `carma tick` on each copy with each binary, while a reader loops on `carma queue`.
set -euo pipefail
old=$1 new=$2 n=${3:-4000} rounds=${4:-3}
work=$(mktemp -d "${BURST_DIR:-/tmp}/carma-burst.XXXXXX")
trap 'rm -rf "$work"' EXIT
gpus='[
{"uuid":"GPU-b-0","name":"A100","memory_total_mib":40960,"memory_used_mib":0,"sm_active":0.0},
{"uuid":"GPU-b-1","name":"A100","memory_total_mib":40960,"memory_used_mib":0,"sm_active":0.0},
{"uuid":"GPU-b-2","name":"A100","memory_total_mib":40960,"memory_used_mib":0,"sm_active":0.0},
{"uuid":"GPU-b-3","name":"A100","memory_total_mib":40960,"memory_used_mib":0,"sm_active":0.0}]'
echo "$gpus" > "$work/gpus.json"
spool() {  # $1: spool dir, N files with increasing ids
  python3 - "$1" "$n" <<'PY'
import os, sys, time
alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
spool, n = sys.argv[1], int(sys.argv[2])
now = int(time.time() * 1000)
for i in range(n):
    v = (now << 32) | (i + 1)
    chars = []
    for _ in range(16):
        chars.append(alphabet[v & 31]); v >>= 5
    ident = "".join(reversed(chars))
    text = 'name = "burst"\ncommand = ["/bin/true"]\nworkdir = "/tmp"\ngpus = 1\nmemory = "12288MiB"\nmax_retries = 3\n'
    path = os.path.join(spool, ident + ".toml")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, text.encode()); os.close(fd)
PY
}
run() {  # $1: binary, $2: home; prints "tick_ms queue_runs queue_median_ms queue_max_ms queue_failures"
  local bin=$1 home=$2 stop="$work/stop.$$" lat="$work/lat.$$"
  rm -f "$stop" "$lat"
  ( while [ ! -e "$stop" ]; do
      s=$(date +%s%N); if CARMA_HOME=$home CARMA_LOCK_TIMEOUT=10s "$bin" queue >/dev/null 2>&1; then ok=1; else ok=0; fi
      echo "$(( ($(date +%s%N) - s) / 1000000 )) $ok" >> "$lat"
    done ) &
  local reader=$!
  local s=$(date +%s%N)
  CARMA_HOME=$home "$bin" tick >/dev/null
  local tick_ms=$(( ($(date +%s%N) - s) / 1000000 ))
  touch "$stop"; wait $reader
  python3 - "$lat" "$tick_ms" <<'PY'
import sys, statistics
rows = [tuple(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
ms = sorted(r[0] for r in rows) or [0]
print(sys.argv[2], len(rows), statistics.median(ms), ms[-1], sum(1 for r in rows if r[1] == 0))
PY
}
echo "binary tick_ms queue_runs queue_median_ms queue_max_ms queue_failures"
for round in $(seq "$rounds"); do
  for which in old new; do
    bin=${!which}; home="$work/$which-$round"
    CARMA_HOME=$home "$bin" init >/dev/null
    printf '[tick]\ngpus = "fake:%s"\n' "$work/gpus.json" > "$home/config.toml"
    CARMA_HOME=$home "$bin" tick >/dev/null   # the first tick: GPUs discovered (and, new, a view)
    # carma with the trust boundary (issue 21) reads each user's folder spool/<uid>/.
    if "$bin" bench adversary --help >/dev/null 2>&1; then
      dir="$home/spool/$(id -u)"; mkdir -p -m 755 "$dir"
    else
      dir="$home/spool"
    fi
    spool "$dir"
    echo "$which $(run "$bin" "$home")"
  done
done
