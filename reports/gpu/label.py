"""One measurement for the GPU kit's labels: a few training steps of one model at one batch
size, optionally under a memory cap, in a process of its own (a fresh CUDA context and
caching allocator each time). Prints one JSON line:

    {"ok": true, "oom": false, "peak_used_mib": ..., "peak_reserved_mib": ..., "context_mib": ...}

    label.py --model NAME --batch N [--steps 4] [--cap-mib MIB] [--cudnn-benchmark]

`NAME` is a timm model, or `tiny` (tiny.py, the dry run's model). On a GPU the cap is
`torch.cuda.set_per_process_memory_fraction(cap / total)`, so the caching allocator refuses
what is over it the way a short card would, and cuDNN/cuBLAS must make do with less
workspace; `peak_used_mib` is the most the device had in use after a step (what nvidia-smi
shows, this process's context included). In a dry run (hw.FAKE_ENV set) the model trains on
the CPU and the fake allocator counts what the run holds instead: parameters, gradients, Adam
state and the tensors autograd saves, rounded up to 2 MiB blocks; a cap below that is an
out-of-memory error.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hw  # noqa: E402
import torch  # noqa: E402

FAKE_CONTEXT_MIB = 500.0


def build(name):
    if name == "tiny":
        import tiny
        return tiny.tiny(), tiny.INPUT_SHAPE
    import timm
    model = timm.create_model(name, pretrained=False)
    shape = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
    return model, shape


def fake_bytes(model, opt, x, y):
    """What a run of one step holds at its peak, as the fake allocator counts it."""
    saved = []

    def pack(t):
        saved.append(t.untyped_storage().nbytes() if t.device.type != "meta" else 0)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    return 4 * params + sum(saved)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--cap-mib", type=float)
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="let cuDNN time its algorithms and keep the fastest (it may take large workspaces)")
    a = p.parse_args()
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    fake = hw.fake_dir()
    device = "cpu" if fake else "cuda"
    torch.manual_seed(0)
    result = {"ok": False, "oom": False, "peak_used_mib": None, "peak_reserved_mib": None, "context_mib": None}
    if not fake:
        free, total = torch.cuda.mem_get_info()
        result["context_mib"] = (total - free) / 2**20
        if a.cap_mib is not None:
            torch.cuda.set_per_process_memory_fraction(min(1.0, a.cap_mib * 2**20 / total))
    model, shape = build(a.model)
    model = model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(a.batch, *shape, device=device)
    classes = getattr(model, "num_classes", None)
    if not classes:  # a plain module: one eval-mode forward (batch-norm needs no batch there)
        model.eval()
        with torch.no_grad():
            classes = model(x[:1]).shape[-1]
        model.train()
    y = torch.randint(0, classes, (a.batch,), device=device)
    try:
        if fake:
            held = math.ceil(fake_bytes(model, opt, x, y) / 2**21) * 2.0
            if a.cap_mib is not None and held > a.cap_mib:
                print(hw.oom_message(held - a.cap_mib, hw.FAKE_TOTAL_MIB, 0), file=sys.stderr)
                result["oom"] = True
            else:
                result.update(ok=True, peak_reserved_mib=held, peak_used_mib=FAKE_CONTEXT_MIB + held,
                              context_mib=FAKE_CONTEXT_MIB)
        else:
            peak_used = 0.0
            for _ in range(a.steps):
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                torch.cuda.synchronize()
                free, total = torch.cuda.mem_get_info()
                peak_used = max(peak_used, (total - free) / 2**20)
            result.update(ok=True, peak_used_mib=peak_used,
                          peak_reserved_mib=torch.cuda.max_memory_reserved() / 2**20)
    except torch.OutOfMemoryError as e:
        print(str(e).splitlines()[0], file=sys.stderr)
        result["oom"] = True
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
