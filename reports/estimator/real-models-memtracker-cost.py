#!/usr/bin/env python3
"""Cost of a FakeTensor-mode peak-memory feature: one Adam training step per (architecture,
batch 2 and 4) under torch's MemTracker, which records peak live bytes by category
(parameters, gradients, optimizer state, activations, temporaries).

This was measured to decide whether the dumper should record such a peak (the dev file's
FakeTensor figure, used as an extra input, only brings the bound in real-models-bounds.py
from 54-62% to 53%). One JSON line per record, with its wall time in seconds.

Usage: python3 reports/estimator/real-models-memtracker-cost.py NAMES.txt OUT.jsonl
"""
import json
import sys
import time
import warnings

import timm
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

warnings.filterwarnings("ignore")


def peak(name, batch):
    # timm's initialisers call .item(), which FakeTensorMode refuses: build on meta, then
    # give the module fake storage.
    with torch.device("meta"):
        meta = timm.create_model(name)
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = meta.to_empty(device="cpu")
        model.train()
        optimizer = torch.optim.Adam(model.parameters())
        # One step on zero gradients creates Adam's state, so the tracked step is a steady one.
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        optimizer.zero_grad()
        x = torch.randn(batch, *model.default_cfg["input_size"])
        tracker = MemTracker()
        tracker.track_external(model, optimizer)
        with tracker:
            model(x).float().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        ((_, categories),) = tracker.get_tracker_snapshot("peak").items()
    return {getattr(k, "value", k): v for k, v in categories.items()}


def main():
    names = [line.strip() for line in open(sys.argv[1]) if line.strip()]
    with open(sys.argv[2], "a") as out:
        for name in names:
            for batch in (2, 4):
                start = time.time()
                try:
                    record = dict(model=name, bs=batch, peak=peak(name, batch))
                except Exception as e:  # one failing architecture must not stop the batch
                    record = dict(model=name, bs=batch, error=str(e)[:200])
                record["s"] = round(time.time() - start, 2)
                out.write(json.dumps(record) + "\n")
                out.flush()


if __name__ == "__main__":
    main()
