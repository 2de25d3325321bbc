"""A small training job for the GPU kit, run by carma's tick.

    job.py --steps N [--ballast-mib M] [--grab-fraction F | --grab-more-mib G] [--grab-after S]
           [--step-seconds T] [--oom-hold-seconds H]
    job.py --fill-leaving-mib L

It holds `--ballast-mib` of GPU memory for its whole run (so that collocated jobs really share
the card), trains a small network for `--steps` steps on random data, and with
`--grab-fraction` it tries, after `--grab-after` seconds of training, to hold that fraction of
the card (in 1 GiB chunks, as a growing activation would): beside other jobs that runs out of
memory, alone it fits. `--grab-more-mib` asks for that much more in one allocation instead (a
batch's activations that do not fit). After an out-of-memory it keeps its memory
`--oom-hold-seconds` (5 s by default, as a script that writes its state on the way out) and
exits 1; 0 exits at once, as most training scripts die. `--fill-leaving-mib` is a process
outside carma: it holds all of the card's free memory but L MiB until it is killed (another
user's job filling the card). On a real GPU the allocations are
CUDA tensors and an out-of-memory error is PyTorch's own. In a dry run (hw.FAKE_ENV set) the
allocations go to the fake GPU's ledger, and a CPU network trains when torch is installed;
without torch the steps are timed sleeps. Prints one line per step.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hw  # noqa: E402

torch = None


def import_torch():
    """torch, or None in a dry run without it (the job is then a plain process that behaves
    like one). Imported after the fake allocations: on a busy machine the import takes
    seconds, and the fake GPU should see the memory held from the start."""
    global torch
    try:
        import torch as t
        torch = t
    except ImportError:
        if not hw.fake_dir():
            raise
    return torch


class Memory:
    """GPU memory this process holds: CUDA tensors, or fake-ledger MiB."""

    def __init__(self):
        self.fake = hw.fake_dir()
        self.held_mib = 0.0
        self.tensors = []

    def total_mib(self):
        if self.fake:
            return hw.FAKE_TOTAL_MIB
        return torch.cuda.mem_get_info()[1] / 2**20

    def take(self, mib):
        if mib <= 0:
            return
        if not self.fake:
            try:
                self.tensors.append(torch.empty(int(mib * 2**20), dtype=torch.uint8, device="cuda"))
            except torch.OutOfMemoryError as e:
                out_of_memory(str(e))
            self.held_mib += mib
            return
        gpu = hw.FakeGpu(self.fake)
        free = hw.FAKE_TOTAL_MIB - hw.FAKE_RESERVED_MIB - gpu.held_mib()
        cap = hw.mps_cap_mib()
        if mib > free or (cap is not None and self.held_mib + mib > cap):
            room = free if cap is None else min(free, cap - self.held_mib)
            out_of_memory(hw.oom_message(mib, hw.FAKE_TOTAL_MIB, max(room, 0)))
        self.held_mib += mib
        hw.hold_fake(self.fake, self.held_mib)

    def own_mib(self):
        """What this process holds through the allocator: the caching allocator's reserved
        memory on a real GPU (the CUDA context, which NVML adds, is not counted), the ledger in
        a dry run."""
        if self.fake:
            return self.held_mib
        return torch.cuda.memory_reserved() / 2**20

    def free_mib(self):
        """The card's free memory now, as the CUDA driver reports it (the fake ledger's in a
        dry run)."""
        if self.fake:
            return hw.FAKE_TOTAL_MIB - hw.FAKE_RESERVED_MIB - hw.FakeGpu(self.fake).held_mib()
        return torch.cuda.mem_get_info()[0] / 2**20


# Seconds a job that ran out of memory keeps what it holds before it exits, as a training
# script that writes its state on the way out does (--oom-hold-seconds; 0: it dies at once).
# carma only requeues an out-of-memory that its own GPU readings corroborate (the GPU near
# full, or the job near its share, near the end): the tick's, or the job's root supervisor's
# every 500 ms, which still see a job that dies between two ticks.
OOM_HOLD_S = 5.0
oom_hold_s = OOM_HOLD_S


def out_of_memory(message):
    """Prints the out-of-memory message, holds the memory for oom_hold_s, exits 1."""
    print(message, file=sys.stderr, flush=True)
    time.sleep(oom_hold_s)
    sys.exit(1)


def fill(leave_mib):
    """Holds all of the card's free memory but `leave_mib` until killed."""
    memory = Memory()
    memory.take(max(0.0, memory.free_mib() - leave_mib))
    print(f"holding {memory.held_mib:.0f} MiB", flush=True)
    while True:
        time.sleep(3600)


def trainer(device):
    """(step function) for a small network, or None without torch."""
    if torch is None:
        return None
    torch.manual_seed(0)
    if device == "cuda":
        import torchvision
        model = torchvision.models.resnet18(num_classes=10).to(device)
        shape = (32, 3, 128, 128)
    else:
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
            torch.nn.Flatten(), torch.nn.Linear(128, 10),
        )
        shape = (8, 3, 16, 16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(*shape, device=device)
    y = torch.randint(0, 10, (shape[0],), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return float(loss)
    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--ballast-mib", type=float, default=0)
    p.add_argument("--grab-fraction", type=float, default=0)
    p.add_argument("--grab-after", type=float, default=0)
    p.add_argument("--grab-mib", type=float, default=0, help="hold this much more (MPS cap test)")
    p.add_argument("--grab-more-mib", type=float, default=0, help="after --grab-after, one allocation of this")
    p.add_argument("--top-up-to-mib", type=float, default=0,
                   help="after one training step, hold this much in all (training's own memory included)")
    p.add_argument("--step-seconds", type=float, default=0.2)
    p.add_argument("--oom-hold-seconds", type=float, default=OOM_HOLD_S)
    p.add_argument("--no-train", action="store_true", help="allocate, report and exit (MPS cap test)")
    p.add_argument("--fill-leaving-mib", type=float, help="hold all but this much of the card until killed")
    p.add_argument("--tag", help="a word in the command line, for the kit to find the process by")
    a = p.parse_args()
    global oom_hold_s
    oom_hold_s = a.oom_hold_seconds
    device = "cpu" if hw.fake_dir() else "cuda"
    if device == "cuda":
        import_torch()
    if a.fill_leaving_mib is not None:
        fill(a.fill_leaving_mib)
    memory = Memory()
    memory.take(a.ballast_mib)
    memory.take(a.grab_mib)
    if a.no_train:
        print(f"holding {memory.held_mib:.0f} MiB", flush=True)
        return 0
    if device == "cpu":
        import_torch()
    step = trainer(device)
    if a.top_up_to_mib > 0:
        # What the model, its optimiser and one step's activations take differs by card and
        # library version; topping up after a step makes the job hold the asked figure whatever
        # they took.
        if step:
            step()
        memory.take(a.top_up_to_mib - memory.own_mib())
    started = time.time()
    grabbed = a.grab_fraction <= 0 and a.grab_more_mib <= 0
    for i in range(a.steps):
        if not grabbed and time.time() - started >= a.grab_after:
            # In chunks, as a growing activation would: PyTorch fails on the chunk that no
            # longer fits, with the message carma's OOM detector reads.
            want = a.grab_fraction * memory.total_mib()
            while memory.held_mib + 1024 <= want:
                memory.take(1024)
            memory.take(a.grab_more_mib)
            grabbed = True
            print(f"holding {memory.held_mib:.0f} MiB", flush=True)
        t0 = time.time()
        loss = step() if step else 2.3 / (i + 1)
        time.sleep(max(0.0, a.step_seconds - (time.time() - t0)))
        print(f"step {i} loss {loss:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
