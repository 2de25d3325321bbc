"""Relabel the training file's timm runs on one real GPU, many at a time, within a deadline.

The training file's labels (`max_gpu_memory_mib`, measured alone on an empty A100-40GB) carry
spikes no model summary predicts, and runs that died early with a low peak. The H200 showed
why the spikes are there (h200-2026-11-26/): cuDNN's
benchmark takes whatever workspace an empty card offers, and gives it back when the card is short
(vgg13 at batch 32: 39,622 MiB reserved with the benchmark on, 5,476 MiB with it off, and it
trains under a 4,792 MiB cap with it on). This measures each run again with PyTorch's defaults
(benchmark off), so the estimator can learn what a job needs rather than what an empty card lent it.

    relabel.py plan --data timm_runs_dev.csv --out worklist.csv [--skip-measured labels.csv]
    relabel.py run --worklist worklist.csv --out DIR [--deadline-minutes 8] [--workers 10]
    relabel.py run ... --fake                                         # the driver alone, no GPU
    relabel.py labels --out labels.csv DIR1/relabel.jsonl ...         # for carma-train --remeasured

`plan` (on the build machine: it reads ../shared) writes model, batch size, the file's label and
what the model may take, in priority order: first every model with a row carma-train's spike
rule flags (data.rs, rule 4), smallest first, then the rest in a fixed shuffled order (a control
sample, and coverage where time allows). Rows the file marks as "filled the card" (>= 40,000 MiB)
are left out, and so are models an earlier run's labels.csv already holds.

`run` starts one worker process per model (a fresh CUDA context each), several at a time on the
one GPU, admitted while the sum of what they may take fits 90% of the card (`need_mib`: the
model's largest peak that fit the A100, or 1.5 x its FakeTensor figure + the context where that
is larger; +20%). A worker trains each batch size in ascending order for a few steps with Adam
on random data, frees its cache between batch sizes, and prints one JSON line per batch: this
process's own device memory from NVML (`proc_used_mib`, context included, what nvidia-smi lists
for the process), the caching allocator's peak (`peak_reserved_mib`) and this process's context
before the model (`context_mib`). A worker that runs out of memory beside others is retried
once, from that batch size on, with twice the room. Results go to DIR/relabel.jsonl as they
come, so a lease that ends hard still leaves them; DIR/relabel-summary.json says what was covered.
"""

import argparse
import csv
import json
import os
import random
import subprocess
import sys
import time

CAPACITY_MIB = 40000.0  # the file's "filled the 40 GB card" marker
CONTEXT_MIB = 1443.0  # the CUDA context in the file's peaks (the A100's)
SPIKE_FACTOR, SPIKE_FLOOR_MIB = 2.5, 512.0  # estimator-training/src/data.rs, rule 4


def plan(args):
    rows = list(csv.DictReader(open(args.data, newline="")))
    by = {}
    for r in rows:
        ft = float(r["faketensor_last_numeric_mib"] or 0)
        by.setdefault(r["model"], {})[int(r["batch_size"])] = (float(r["max_gpu_memory_mib"]), ft)
    done = set()
    for path in args.skip_measured:
        done |= {r["model"] for r in csv.DictReader(open(path, newline=""))}
    # The spike rule of carma-train (data.rs, rule 4): a peak far above the run's tensors.
    spike = lambda v, ft: ft > 0 and v - CONTEXT_MIB - SPIKE_FLOOR_MIB > SPIKE_FACTOR * ft  # noqa: E731
    # What a model may take on this card: its largest peak that fit the A100, or its tensors
    # with room to spare where the A100 run died early (its peak then says nothing).
    need = lambda m: max(max(v if v < CAPACITY_MIB else 0, 1.5 * ft + CONTEXT_MIB)  # noqa: E731
                         for v, ft in by[m].values())
    spiky, rest = [], []
    for model, labels in by.items():
        if model in done:
            continue
        (spiky if any(spike(v, ft) for v, ft in labels.values() if v < CAPACITY_MIB) else rest).append(model)
    # Smallest first: with a short lease, the most models measured.
    spiky.sort(key=lambda m: (need(m), m))
    rest.sort()
    random.Random(args.seed).shuffle(rest)
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["model", "batch_size", "file_label_mib", "need_mib", "tier"])
        for tier, models in (("spiky", spiky), ("control", rest)):
            for m in models:
                for b in sorted(by[m]):
                    if by[m][b][0] < CAPACITY_MIB:
                        w.writerow([m, b, int(by[m][b][0]), int(need(m)), tier])
    print(f"{len(spiky)} models with a spike, {len(rest)} others, {len(done)} measured before -> {args.out}")
    return 0


# --- the worker: one model, its batch sizes ascending, in a process of its own ---------------
def worker(args):
    import torch
    torch.set_num_threads(2)
    torch.backends.cudnn.benchmark = False  # PyTorch's default, said out loud
    batches = [int(b) for b in args.batches.split(",")]
    pid = os.getpid()
    proc_used = lambda: None  # noqa: E731
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())

        def proc_used():
            try:
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if p.pid == pid and p.usedGpuMemory is not None:
                        return p.usedGpuMemory / 2**20
            except pynvml.NVMLError:
                pass
            return None
    except Exception:  # no pynvml: the allocator's figures only
        pass

    def emit(**kw):
        print(json.dumps(dict(model=args.model, **kw)), flush=True)

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    context = proc_used()
    try:
        import timm
        model = timm.create_model(args.model, pretrained=False)
        shape = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
        model = model.cuda().train()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        classes = getattr(model, "num_classes", None) or 1000
    except torch.OutOfMemoryError as e:  # beside others: retried alone
        emit(batch=batches[0], ok=False, oom=True, error=str(e).splitlines()[0][:200], rest=batches[1:])
        return 3
    except Exception as e:  # an unknown name in this timm, a model that will not build
        for b in batches:
            emit(batch=b, ok=False, oom=False, error=f"{type(e).__name__}: {str(e)[:200]}")
        return 0
    for i, b in enumerate(batches):
        t0 = time.time()
        x = y = out = None
        opt.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        peak_proc = None
        try:
            torch.manual_seed(0)
            x = torch.randn(b, *shape, device="cuda")
            y = torch.randint(0, classes, (b,), device="cuda")
            for _ in range(args.steps):
                opt.zero_grad(set_to_none=True)
                out = model(x)
                if isinstance(out, (tuple, list)):
                    out = out[0]
                torch.nn.functional.cross_entropy(out, y).backward()
                opt.step()
                torch.cuda.synchronize()
                u = proc_used()
                if u is not None:
                    peak_proc = u if peak_proc is None else max(peak_proc, u)
            emit(batch=b, ok=True, oom=False, proc_used_mib=peak_proc,
                 peak_reserved_mib=torch.cuda.max_memory_reserved() / 2**20,
                 peak_allocated_mib=torch.cuda.max_memory_allocated() / 2**20,
                 context_mib=context, steps=args.steps, secs=round(time.time() - t0, 2))
        except torch.OutOfMemoryError as e:
            free, _ = torch.cuda.mem_get_info()
            emit(batch=b, ok=False, oom=True, free_mib=free / 2**20, error=str(e).splitlines()[0][:200],
                 rest=batches[i + 1:])
            return 3  # the driver retries this batch and the larger ones alone
        except Exception as e:
            msg = f"{type(e).__name__}: {str(e)[:200]}"
            if "out of memory" in msg or "ALLOC_FAILED" in msg or "NOT_ENOUGH_WORKSPACE" in msg:
                emit(batch=b, ok=False, oom=True, error=msg, rest=batches[i + 1:])
                return 3
            emit(batch=b, ok=False, oom=False, error=msg)
        finally:
            x = y = out = None
    return 0


def fake_worker(args):
    """The driver's dry run: no torch, a made-up measurement per batch. A model named in
    RELABEL_FAKE_OOM runs out of memory at its third batch size the first time (the retry path)."""
    batches = args.batches.split(",")
    marker = os.path.join(os.environ.get("TMPDIR", "/tmp"), "relabel-fake-oom-" + args.model)
    for i, b in enumerate(batches):
        time.sleep(0.05)
        if args.model in os.environ.get("RELABEL_FAKE_OOM", "").split(",") and i == 2 and not os.path.exists(marker):
            open(marker, "w").close()
            print(json.dumps(dict(model=args.model, batch=int(b), ok=False, oom=True, free_mib=0.0,
                                  error="CUDA out of memory (fake)", rest=[int(c) for c in batches[i + 1:]])))
            return 3
        if args.model == os.environ.get("RELABEL_FAKE_CRASH"):
            print("Traceback: ImportError: fake", file=sys.stderr)
            return 1
        print(json.dumps(dict(model=args.model, batch=int(b), ok=True, oom=False, proc_used_mib=500.0 + int(b),
                              peak_reserved_mib=float(b), peak_allocated_mib=float(b), context_mib=500.0,
                              steps=args.steps, secs=0.05)), flush=True)
    return 0


# --- the driver --------------------------------------------------------------------------------
def run(args):
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    deadline = t0 + args.deadline_minutes * 60
    jobs = {}  # model -> {"batches": [...], "est": MiB, "tier": str}
    order = []
    for r in csv.DictReader(open(args.worklist, newline="")):
        m = r["model"]
        if m not in jobs:
            jobs[m] = {"batches": [], "est": 0.0, "tier": r["tier"]}
            order.append(m)
        jobs[m]["batches"].append(int(r["batch_size"]))
        jobs[m]["est"] = float(r.get("need_mib") or r["file_label_mib"])
    if args.fake:
        total = 143771.0
    else:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True).stdout
        total = float(out.split()[0])
    budget = 0.9 * total
    queue = [(m, jobs[m]["batches"], max(2048.0, 1.2 * jobs[m]["est"]), False) for m in order]
    running = {}  # Popen -> (model, est, alone, started, outfile)
    results = open(os.path.join(args.out, "relabel.jsonl"), "a")
    done_models, retried, killed, rows = [], 0, 0, 0
    me = os.path.abspath(__file__)
    stop_launch = deadline - args.tail_seconds
    last_note = t0

    def used():
        return sum(v[1] for v in running.values())

    def reap(p, info):
        nonlocal retried, rows
        model, est, alone, started, out, concurrent = info
        out.seek(0)
        seen = []
        text = out.read()
        for line in text.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            rec.update(alone=alone, concurrent_at_start=concurrent, wall_s=round(time.time() - started, 1))
            results.write(json.dumps(rec) + "\n")
            rows += 1
            seen.append(rec)
        if not seen:  # it died before its first line: keep why
            rec = dict(model=model, ok=False, oom=False, error="worker exited %s: %s" % (p.returncode, text.strip()[-300:]),
                       alone=alone, wall_s=round(time.time() - started, 1))
            results.write(json.dumps(rec) + "\n")
        results.flush()
        out.close()
        oom = [r for r in seen if r.get("oom")]
        if oom and not alone:
            rest = [oom[0]["batch"]] + oom[0].get("rest", [])
            queue.insert(0, (model, rest, min(budget, 2 * est), True))  # retried once, with twice the room
            retried += 1
        else:
            done_models.append(model)

    while (queue or running) and time.time() < deadline - 5:
        for p in [p for p in running if p.poll() is not None]:
            reap(p, running.pop(p))
        while queue and len(running) < args.workers and time.time() < stop_launch:
            model, batches, est, alone = queue[0]
            if running and used() + est > budget:
                break
            queue.pop(0)
            out = open(os.path.join(args.out, ".w-" + model), "w+")
            cmd = [sys.executable, me, "worker", "--model", model, "--batches", ",".join(map(str, batches)),
                   "--steps", str(args.steps)]
            if args.fake:
                cmd.append("--fake")
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="2"))
            running[p] = (model, est, alone, time.time(), out, len(running) + 1)
        for p, info in list(running.items()):
            if time.time() - info[3] > args.model_timeout:
                p.kill()
                p.wait()
                killed += 1
                reap(p, running.pop(p))
        if not running and (not queue or time.time() >= stop_launch):
            break
        if time.time() - last_note > 30:
            last_note = time.time()
            print(f"{time.time() - t0:5.0f} s: {len(done_models)} models done, {len(running)} running "
                  f"({used():.0f} MiB expected), {len(queue)} queued, {rows} rows, {retried} retried", flush=True)
        time.sleep(0.1)
    for p, info in list(running.items()):  # the deadline: what finished is kept
        p.kill()
        p.wait()
        killed += 1
        reap(p, running.pop(p))
    for f in os.listdir(args.out):
        if f.startswith(".w-"):
            os.remove(os.path.join(args.out, f))
    summary = dict(models_done=len(done_models), models_left=len(queue), rows=rows, retried=retried,
                   killed=killed, seconds=round(time.time() - t0, 1), workers=args.workers, steps=args.steps,
                   card_mib=total, spiky_models=sum(1 for m in order if jobs[m]["tier"] == "spiky"),
                   spiky_done=sum(1 for m in done_models if jobs[m]["tier"] == "spiky"), fake=args.fake)
    json.dump(summary, open(os.path.join(args.out, "relabel-summary.json"), "w"), indent=1)
    print(json.dumps(summary))
    return 0


def labels(args):
    """Joins run outputs into `model,batch_size,...,a100_equivalent_mib` for carma-train's
    `--remeasured`: this process's device memory less its context plus the A100's context
    (1,443 MiB), the figure the same run would show in the training file's terms."""
    best = {}
    for path in args.jsonl:
        for line in open(path):
            r = json.loads(line)
            if r.get("ok") and r.get("proc_used_mib") is not None:
                best[(r["model"], r["batch"])] = r  # a later run's figure wins
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["model", "batch_size", "h200_used_mib", "h200_context_mib", "peak_reserved_mib",
                    "a100_equivalent_mib", "alone"])
        for (m, b), r in sorted(best.items()):
            w.writerow([m, b, round(r["proc_used_mib"]), round(r["context_mib"]), round(r["peak_reserved_mib"]),
                        round(r["proc_used_mib"] - r["context_mib"] + args.file_context_mib), r.get("alone", False)])
    print(f"{len(best)} rows -> {args.out}")
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="verb", required=True)
    a = sub.add_parser("plan")
    a.add_argument("--data", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--skip-measured", action="append", default=[],
                   help="a labels.csv of an earlier run: its models are not planned again")
    a = sub.add_parser("run")
    a.add_argument("--worklist", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--deadline-minutes", type=float, default=8.0)
    a.add_argument("--tail-seconds", type=float, default=45.0, help="stop starting models this long before the deadline")
    a.add_argument("--workers", type=int, default=10)
    a.add_argument("--steps", type=int, default=3)
    a.add_argument("--model-timeout", type=float, default=150.0)
    a.add_argument("--fake", action="store_true")
    a = sub.add_parser("labels")
    a.add_argument("--out", required=True)
    a.add_argument("--file-context-mib", type=float, default=1443.0)
    a.add_argument("jsonl", nargs="+")
    a = sub.add_parser("worker")
    a.add_argument("--model", required=True)
    a.add_argument("--batches", required=True)
    a.add_argument("--steps", type=int, default=3)
    a.add_argument("--fake", action="store_true")
    args = p.parse_args()
    if args.verb == "plan":
        return plan(args)
    if args.verb == "run":
        return run(args)
    if args.verb == "labels":
        return labels(args)
    return fake_worker(args) if args.fake else worker(args)


if __name__ == "__main__":
    sys.exit(main())
