#!/bin/bash
# One user's flood of junk spool files: what one `carma tick` costs with each of two binaries,
# run alternately on fresh state directories (a real redb journal, the real spool).
#
#   bash reports/architecture/ingest-flood.sh BEFORE_BIN AFTER_BIN [ROUNDS] [FILES]
#
# Each round makes, for each binary, a state directory whose spool holds FILES (default 2000)
# spool files of uid 40002 that are not submissions (named like task ids, so each must be
# opened to be refused) and 10 more of uid 40001, then runs one tick. Prints each tick's wall
# time, then, from one more tick of each under strace, the opens of each user's spool files,
# the Rejected records per user and the files left in each folder. Run as root.
set -euo pipefail
before=$1 after=$2 rounds=${3:-5} files=${4:-2000}
scratch=$(mktemp -d /dev/shm/ingest-flood.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

setup() { # BIN HOME
  "$1" init --home "$2" >/dev/null
  python3 - "$2" "$files" <<'PY'
import os, sys
home, files = sys.argv[1], int(sys.argv[2])
for uid, prefix, count in ((40002, "a", files), (40001, "b", 10)):
    folder = os.path.join(home, "spool", str(uid))
    os.mkdir(folder, 0o755)
    os.chown(folder, uid, uid)
    for n in range(count):
        path = os.path.join(folder, "%s%015d.toml" % (prefix, n))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"not a spool file\n")
        os.close(fd)
        os.chown(path, uid, uid)
PY
}

for round in $(seq "$rounds"); do
  for which in before after; do
    bin=${!which} home=$scratch/$which-$round
    setup "$bin" "$home"
    start=$(date +%s%N)
    "$bin" tick --home "$home" >/dev/null 2>&1
    end=$(date +%s%N)
    echo "round $round $which tick_ms $(( (end - start) / 1000000 ))"
  done
done

for which in before after; do
  bin=${!which} home=$scratch/$which-strace
  setup "$bin" "$home"
  strace -f -qq -e trace=openat -o "$scratch/$which.strace" "$bin" tick --home "$home" >/dev/null 2>&1
  flooder=$(grep -c '"a[0-9]\{15\}\.toml"' "$scratch/$which.strace" || true)
  other=$(grep -c '"b[0-9]\{15\}\.toml"' "$scratch/$which.strace" || true)
  events=$("$bin" events --home "$home" --kind Rejected --json)
  rejected_flooder=$(grep -c '"submitter_uid":40002' <<<"$events" || true)
  rejected_other=$(grep -c '"submitter_uid":40001' <<<"$events" || true)
  left_flooder=$(find "$home/spool/40002" -type f | wc -l)
  left_other=$(find "$home/spool/40001" -type f | wc -l)
  echo "$which opens uid40002 $flooder uid40001 $other; Rejected uid40002 $rejected_flooder uid40001 $rejected_other; left uid40002 $left_flooder uid40001 $left_other"
done
