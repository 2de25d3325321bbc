#!/usr/bin/env bash
# carma on a real GPU, in one command (see reports/gpu/README.md):
#
#   reports/gpu/run.sh --out DIR [--carma PATH] [--dry-run] [--label-minutes N]
#                     [--deadline-minutes N] [--only SECTIONS]
#
# Needs bash, python3 and a prebuilt carma (--carma, default: `carma` on PATH); on a real GPU
# also nvidia-smi, a working driver and PyTorch with CUDA (torchvision and timm for the jobs and
# the labels). No network, no Rust toolchain. --dry-run does the same on a fake GPU, anywhere.
# Writes DIR/report.md, report.json, nvml.csv, labels.csv, carma-report.txt, carma-events.jsonl.
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
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
dry_flag=()
[ "$dry" = 1 ] && dry_flag=(--dry-run)
exec python3 "$here/kit.py" --out "$out" --carma "$carma" "${dry_flag[@]}" "${rest[@]+"${rest[@]}"}"
