#!/usr/bin/env python3
"""A synthetic training job for `carma replay`: real, training-like GPU load without datasets.

It allocates roughly --model-mb MiB of GPU memory (a stack of square float32 weight matrices
plus their gradients and Adam state, about 4 bytes x 4 copies per parameter), then runs
forward/backward passes of matmuls over a --batch-size batch until --minutes of wall time
have passed, printing progress about every 10 seconds. It imports only torch and the
standard library.

Example, from a replay (placeholders are filled in by carma, no shell involved):

    carma replay --trace traces/synthetic_philly_mix_90.csv \\
        --profiles ../shared/traces/workload_profiles.csv --speedup 10 -- \\
        python3 traces/synthetic_train.py --model-mb {mem_mib} --minutes {minutes} \\
        --batch-size {batch_size}

UNTESTED HERE: the machine carma is built on has no GPU and no torch, so this script has not
been run. Expect to adjust it on the first real GPU run (the memory it reaches is an
approximation; compare with nvidia-smi).
"""

import argparse
import math
import sys
import time

import torch


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-mb", type=float, required=True, help="GPU memory to reach, MiB")
    parser.add_argument("--minutes", type=float, required=True, help="wall time to train for")
    parser.add_argument("--batch-size", type=int, default=32, help="rows per step (0 means 32)")
    parser.add_argument("--width", type=int, default=2048, help="size of each square layer")
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("synthetic_train: no CUDA device visible", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    batch = args.batch_size if args.batch_size > 0 else 32
    width = args.width
    # Weights, gradients and two Adam moments: 4 float32 copies per parameter.
    bytes_per_layer = width * width * 4 * 4
    target_bytes = max(args.model_mb, 1.0) * 1024 * 1024
    layers = max(1, int(target_bytes // bytes_per_layer))
    torch.manual_seed(0)
    weights = [
        torch.nn.Parameter(torch.randn(width, width, device=device) / math.sqrt(width))
        for _ in range(layers)
    ]
    optimizer = torch.optim.Adam(weights, lr=1e-4)
    x = torch.randn(batch, width, device=device)
    deadline = time.monotonic() + max(args.minutes, 0.0) * 60.0
    started = time.monotonic()
    last_print = 0.0
    steps = 0
    print(
        f"synthetic_train: {layers} layers of {width}x{width}, batch {batch}, "
        f"~{layers * bytes_per_layer / 2**20:.0f} MiB of parameters and state, {args.minutes} min",
        flush=True,
    )
    while time.monotonic() < deadline:
        h = x
        for w in weights:
            h = torch.tanh(h @ w)
        loss = h.square().mean()
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        steps += 1
        now = time.monotonic()
        if now - last_print >= 10.0:
            torch.cuda.synchronize()
            used = torch.cuda.max_memory_allocated() / 2**20
            print(
                f"step {steps} t={now - started:.0f}s loss={loss.item():.5f} peak={used:.0f} MiB",
                flush=True,
            )
            last_print = now
    torch.cuda.synchronize()
    print(f"synthetic_train: done, {steps} steps in {time.monotonic() - started:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
