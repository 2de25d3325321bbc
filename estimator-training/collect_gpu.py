#!/usr/bin/env python3
"""Measure the peak GPU memory of short training runs, to build carma's own training data.

UNTESTED: written on a machine without a GPU or torch; it has never run. Check it on one
model against `nvidia-smi` by hand before collecting a dataset with it.

For each (model, batch size) it starts a child process that trains the model with Adam in
fp32 on random data for `--seconds`, while the parent samples `nvidia-smi
--query-gpu=memory.used` every 0.2 s on that GPU. The label is the maximum, CUDA context
included, the same definition as the GPUMemNet data. An out-of-memory run is recorded as
`oom` with the card's capacity, never as a made-up value. The model summary is written next
to the CSV with dump_model.py, so each row pairs a summary with a label.

Usage:
    python collect_gpu.py --gpu 0 --out runs.csv --seconds 60 \\
        torchvision:resnet50@32,64,128 torchvision:vgg16@32,64,128
"""

import argparse
import csv
import os
import subprocess
import sys
import time

CHILD = r'''
import sys, time, torch
sys.path.insert(0, {here!r})
from dump_model import build
model, kind = build({spec!r}, {seq})
model = model.to_empty(device="cuda")
for p in model.parameters():
    torch.nn.init.normal_(p, std=0.02)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
batch = {batch}
if kind == "tokens":
    x = {{"input_ids": torch.randint(0, 1000, (batch, {seq}), device="cuda")}}
else:
    x = torch.randn((batch, *{shape}), device="cuda")
end = time.time() + {seconds}
while time.time() < end:
    out = model(**x) if isinstance(x, dict) else model(x)
    out = out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", out)
    out.float().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
'''


def used_mib(gpu: int) -> int:
    text = subprocess.check_output(
        ["nvidia-smi", f"--id={gpu}", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], text=True
    )
    return int(text.strip().splitlines()[0])


def total_mib(gpu: int) -> int:
    text = subprocess.check_output(
        ["nvidia-smi", f"--id={gpu}", "--query-gpu=memory.total", "--format=csv,noheader,nounits"], text=True
    )
    return int(text.strip().splitlines()[0])


def run_one(spec, batch, args):
    here = os.path.dirname(os.path.abspath(__file__))
    shape = tuple(int(d) for d in args.input_shape.split(","))
    code = CHILD.format(here=here, spec=spec, seq=args.seq_len, batch=batch, shape=shape, seconds=args.seconds)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(args.gpu))
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
    peak = 0
    while child.poll() is None:
        peak = max(peak, used_mib(args.gpu))
        time.sleep(0.2)
    stderr = child.stderr.read()
    if child.returncode != 0:
        if "out of memory" in stderr.lower():
            return "oom", total_mib(args.gpu)
        raise RuntimeError(f"{spec}@{batch} failed:\n{stderr}")
    return "ok", peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="MODEL@B1,B2,... with MODEL as dump_model.py takes it")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--input-shape", default="3,224,224")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if used_mib(args.gpu) > 0:
        print(f"warning: GPU {args.gpu} already has memory in use; the labels will include it", file=sys.stderr)
    summaries = os.path.join(os.path.dirname(os.path.abspath(args.out)), "summaries")
    os.makedirs(summaries, exist_ok=True)
    new = not os.path.exists(args.out)
    with open(args.out, "a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(["model", "batch_size", "status", "max_gpu_memory_mib", "summary"])
        for run in args.runs:
            spec, _, batches = run.partition("@")
            for batch in [int(b) for b in batches.split(",")]:
                summary = os.path.join(summaries, f"{spec.replace(':', '_')}_{batch}.json")
                dump = [sys.executable, os.path.join(os.path.dirname(__file__), "dump_model.py"), spec,
                        "--batch-size", str(batch), "--out", summary]
                dump += ["--seq-len", str(args.seq_len)] if spec.startswith("transformers:") else ["--input-shape", args.input_shape]
                subprocess.check_call(dump)
                status, peak = run_one(spec, batch, args)
                writer.writerow([spec, batch, status, peak, summary])
                f.flush()
                print(f"{spec}@{batch}: {status} {peak} MiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
