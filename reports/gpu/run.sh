#!/usr/bin/env bash
# carma on a real GPU, in one command (see reports/gpu/README.md):
#
#   reports/gpu/run.sh --out DIR [--carma PATH] [--dry-run] [--label-minutes N]
#                     [--deadline-minutes N] [--only SECTIONS]
#
# Needs bash, python3 and a prebuilt carma (--carma, default: `carma` on PATH); on a real GPU
# also nvidia-smi, a working driver and PyTorch with CUDA (torchvision and timm for the jobs and
# the labels). No network, no Rust toolchain. --dry-run does the same on a fake GPU, anywhere.
# Writes DIR/report.md, report.json, nvml.csv, labels.csv, carma-report.txt, carma-events.jsonl,
# suspend.txt. Sections (--only): suspend, nvml, queue, recovery, mps, labels.
# A missing prerequisite: exit 2 with one line saying which.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out="" carma="" dry=0 rest=()
die() { echo "run.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
        --carma) [ $# -ge 2 ] || die "--carma needs a path"; carma=$2; shift 2 ;;
        --dry-run) dry=1; shift ;;
        --keep-work) rest+=("$1"); shift ;;
        --label-minutes|--deadline-minutes|--only) [ $# -ge 2 ] || die "$1 needs a value"; rest+=("$1" "$2"); shift 2 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument $1 (usage: run.sh --out DIR [--carma PATH] [--dry-run])" ;;
    esac
done
[ -n "$out" ] || die "--out DIR is required"
command -v python3 >/dev/null 2>&1 || die "python3 is not installed"
if [ -z "$carma" ]; then carma=$(command -v carma) || die "no carma on PATH: pass --carma PATH (a prebuilt binary)"; fi
[ -x "$carma" ] || die "$carma is not an executable file: pass --carma PATH"
"$carma" --version >/dev/null 2>&1 || die "$carma --version failed: is it a carma binary for this machine?"
if [ "$dry" = 0 ]; then
    command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found: no NVIDIA driver here (try --dry-run)"
    nvidia-smi -L >/dev/null 2>&1 || die "nvidia-smi -L failed: the driver sees no GPU"
    python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
        || die "PyTorch with CUDA is not importable by python3 (pip install torch torchvision timm)"
    python3 -c 'import torchvision, timm' 2>/dev/null || die "torchvision and timm are needed for the jobs and labels"
fi
mkdir -p "$out" || die "cannot create $out"

# Suspend (mode = "suspend"): NVIDIA's cuda-checkpoint suspends a small PyTorch job's CUDA state,
# SIGSTOP stops it, its GPU memory is released; SIGCONT and a second --toggle resume it on the
# same GPU and it finishes with the output of an uninterrupted run. Writes DIR/suspend.txt.
# carma's tick detects cuda-checkpoint the same way (--get-state --pid on each GPU process);
# this section proves the mechanism on the GPU. Without cuda-checkpoint it says so and goes on.
gpu_mib() { # PID: the GPU memory nvidia-smi shows for it, MiB ("none" when it holds none)
    local mib
    mib=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
        | awk -F', *' -v p="$1" '$1 == p { print $2 }')
    echo "${mib:-none}"
}
suspend_proof() {
    local log="$out/suspend.txt" ckpt job want got pid mib_before mib_suspended mib_resumed state
    ckpt=$(command -v cuda-checkpoint) || {
        echo "cuda-checkpoint not installed: suspend not proven" | tee "$log"; return 0; }
    job=$(mktemp -d)
    cat > "$job/job.py" <<'PY'
import sys, time, torch
torch.manual_seed(0)
x = torch.rand(256, 1024, 1024, device="cuda")  # 1 GiB on the GPU
total = 0.0
open(sys.argv[1], "w").write("ready\n")
for step in range(40):
    x = torch.sin(x * 1.0001 + 0.25)
    total += float(x.double().sum())
    time.sleep(0.25)
print(f"{total:.6f}")
PY
    want=$(python3 "$job/job.py" "$job/ready0") || { echo "the reference run failed" | tee "$log"; return 0; }
    python3 "$job/job.py" "$job/ready" > "$job/out" &
    pid=$!
    for _ in $(seq 600); do [ -s "$job/ready" ] && break; sleep 0.1; done
    sleep 2
    {
        echo "cuda-checkpoint: $ckpt; job pid $pid; reference output $want"
        mib_before=$(gpu_mib "$pid"); echo "before suspend: $mib_before MiB on the GPU"
        echo "get-state: $("$ckpt" --get-state --pid "$pid" 2>&1)"
        "$ckpt" --toggle --pid "$pid" 2>&1 && kill -STOP "$pid"
        echo "after --toggle + SIGSTOP, get-state: $("$ckpt" --get-state --pid "$pid" 2>&1)"
        echo "process state: $(awk '{print $3}' "/proc/$pid/stat")"
        sleep 3
        mib_suspended=$(gpu_mib "$pid"); echo "suspended: $mib_suspended MiB on the GPU"
        kill -CONT "$pid"; "$ckpt" --toggle --pid "$pid" 2>&1
        state=$("$ckpt" --get-state --pid "$pid" 2>&1); echo "after SIGCONT + --toggle, get-state: $state"
        sleep 1
        mib_resumed=$(gpu_mib "$pid"); echo "resumed: $mib_resumed MiB on the GPU"
        wait "$pid"; echo "job exit: $?"
        got=$(cat "$job/out"); echo "job output: $got"
        if [ "$mib_before" != none ] && [ "$mib_suspended" = none ] && [ "$mib_resumed" != none ] \
            && [ "$state" = running ] && [ "$got" = "$want" ]; then
            echo "suspend proven: GPU memory released while suspended, resumed, output identical"
        else
            echo "suspend NOT proven (see above)"
        fi
    } > "$log" 2>&1
    cat "$log"
    rm -rf "$job"
}
# --only without "suspend" skips it (kit.py is told the other names).
only=""
for ((i = 0; i < ${#rest[@]}; i++)); do [ "${rest[$i]}" = --only ] && only=${rest[$((i + 1))]}; done
if [ "$dry" = 0 ] && { [ -z "$only" ] || [[ ",$only," == *,suspend,* ]]; }; then suspend_proof; fi
if [ -n "$only" ]; then
    only=$(echo ",$only," | sed 's/,suspend,/,/g; s/^,//; s/,$//')
    [ -n "$only" ] || { echo "run.sh: only the suspend section was asked for"; exit 0; }
    for ((i = 0; i < ${#rest[@]}; i++)); do [ "${rest[$i]}" = --only ] && rest[i + 1]=$only; done
fi

dry_flag=()
[ "$dry" = 1 ] && dry_flag=(--dry-run)
exec python3 "$here/kit.py" --out "$out" --carma "$carma" "${dry_flag[@]}" "${rest[@]+"${rest[@]}"}"
