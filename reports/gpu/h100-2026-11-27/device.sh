#!/usr/bin/env bash
# One lease: probes, the kit (7 min), then relabel.py for the rest. Everything lands in $OUT.
set -u
t0=$(date +%s)
mkdir -p /tmp/kit /tmp/relabel
{
  echo "== date"; date -u
  echo "== nvidia-smi"; nvidia-smi
  echo "== nvidia-smi -q (head)"; nvidia-smi -q | head -80
  echo "== python/torch/timm"; python3 -c 'import torch,timm,torchvision,sys;print(sys.version);print(torch.__version__,timm.__version__,torchvision.__version__,torch.cuda.get_device_name(0))'
  echo "== cuda-checkpoint"; command -v cuda-checkpoint || echo "no cuda-checkpoint on PATH"; ls /usr/bin /usr/local/bin /usr/local/cuda/bin 2>/dev/null | grep -i checkpoint || echo "none in bin dirs"
  python3 - <<'PY'
import ctypes
try:
    l = ctypes.CDLL("libcuda.so.1")
    for s in ["cuCheckpointProcessLock","cuCheckpointProcessCheckpoint","cuCheckpointProcessRestore","cuCheckpointProcessUnlock","cuCheckpointProcessGetState"]:
        print(s, hasattr(l, s))
    v = ctypes.c_int(); l.cuDriverGetVersion(ctypes.byref(v)); print("cuDriverGetVersion", v.value)
except Exception as e:
    print("libcuda:", e)
PY
  echo "== mps"; command -v nvidia-cuda-mps-control || echo "no nvidia-cuda-mps-control"
  echo "== kernel"; uname -a; nproc; free -g
} > /tmp/kit-env.txt 2>&1
cp /tmp/kit-env.txt "$OUT/environment.txt"
timeout 440 reports/gpu/run.sh --out /tmp/kit --carma .gpu/carma --deadline-minutes 7 --label-minutes 3 > /tmp/kit/kit-log.txt 2>&1
echo "kit rc=$? at $(( $(date +%s) - t0 )) s" >> /tmp/kit/kit-log.txt
tar czf "$OUT/kit.tgz" -C /tmp kit
left=$(( 560 - ($(date +%s) - t0) ))
if [ "$left" -gt 60 ]; then
  mins=$(python3 -c "print(round(($left-25)/60,2))")
  timeout $left python3 reports/gpu/relabel.py run --worklist .gpu/worklist.csv --out /tmp/relabel --deadline-minutes "$mins" > /tmp/relabel/run-log.txt 2>&1
  echo "relabel rc=$? at $(( $(date +%s) - t0 )) s, deadline $mins min" >> /tmp/relabel/run-log.txt
fi
tar czf "$OUT/relabel.tgz" -C /tmp relabel
echo "total $(( $(date +%s) - t0 )) s"
