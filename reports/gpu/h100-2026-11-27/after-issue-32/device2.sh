#!/usr/bin/env bash
# Second lease call: the queue section with the merged carma (OOM evidence), first with a job
# that exits at once after its out-of-memory (as most scripts do), then with the kit's 5 s hold.
set -u
t0=$(date +%s)
mkdir -p /tmp/q0 /tmp/q5
sed -i 's/^OOM_HOLD_S = 5.0$/OOM_HOLD_S = 0.0/' reports/gpu/job.py
grep -n '^OOM_HOLD_S' reports/gpu/job.py > /tmp/q0/hold.txt
timeout 125 reports/gpu/run.sh --out /tmp/q0 --carma .gpu/carma --only queue > /tmp/q0/kit-log.txt 2>&1
echo "rc=$? at $(( $(date +%s) - t0 )) s" >> /tmp/q0/kit-log.txt
tar czf "$OUT/q0.tgz" -C /tmp q0
sed -i 's/^OOM_HOLD_S = 0.0$/OOM_HOLD_S = 5.0/' reports/gpu/job.py
left=$(( 235 - ($(date +%s) - t0) ))
if [ "$left" -gt 60 ]; then
  grep -n '^OOM_HOLD_S' reports/gpu/job.py > /tmp/q5/hold.txt
  timeout "$left" reports/gpu/run.sh --out /tmp/q5 --carma .gpu/carma --only queue > /tmp/q5/kit-log.txt 2>&1
  echo "rc=$? at $(( $(date +%s) - t0 )) s" >> /tmp/q5/kit-log.txt
  tar czf "$OUT/q5.tgz" -C /tmp q5
fi
echo "total $(( $(date +%s) - t0 )) s"
