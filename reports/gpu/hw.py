"""The only place the GPU kit reads hardware: the real GPU (nvidia-smi, CUDA through torch)
or, in a dry run, a fake GPU that the same code drives.

The fake GPU is a directory: `gpus.json` in carma's fake-GPU format (schema/fake-gpus.schema.json),
which carma reads with `gpus = "fake:FILE"`, and one ledger file per process that "holds" fake
memory (`mem-<pid>`: MiB as text). Free memory is the total minus what live processes hold,
so a job that asks for more than is free fails the way PyTorch does: the caching allocator's
out-of-memory message on stderr and exit status 1. A CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in the
environment caps a fake process the way the MPS server caps a real one.

The file lists each live holder as NVML lists a compute process (its pid and its own memory),
and in a dry run the kit keeps it current every REFRESH_S on a thread of its own, as
`commands/demo/hardware.rs` does for the demo: a process that has exited holds nothing, as a
real GPU frees a dead process's memory. So the tick and each job's root supervisor (which reads
the same source every 500 ms) see a job's own memory the way they see it through NVML, and the
same evidence path decides on a fake GPU and on a real one.
"""

import json
import os
import shutil
import subprocess
import threading
import time

FAKE_ENV = "GPU_KIT_FAKE_GPU"
FAKE_TOTAL_MIB = 81559
FAKE_RESERVED_MIB = 538
FAKE_UUID = "GPU-fake-kit-0000"
FAKE_NAME = "NVIDIA H100 80GB HBM3 (fake)"
# How often the dry run's hardware rewrites the fake file: well inside the supervisor's 500 ms
# cadence, so what a job holds for a second is read as a real GPU's would be.
REFRESH_S = 0.1
SMI_FIELDS = [
    "index", "uuid", "name", "memory.total", "memory.used", "memory.reserved", "memory.free",
    "utilization.gpu", "power.draw", "mig.mode.current",
]
# Fields not every nvidia-smi knows; a missing one reads "[not a field of this nvidia-smi]".
SMI_OPTIONAL = ["total_energy_consumption", "power.draw.instant", "clocks.sm"]


def fake_dir():
    """The fake GPU directory of this process, or None on real hardware."""
    return os.environ.get(FAKE_ENV) or None


def oom_message(asked_mib, total_mib, free_mib):
    """PyTorch's caching-allocator message, as carma's OOM detector sees it on stderr."""
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {asked_mib / 1024:.2f} GiB. "
        f"GPU 0 has a total capacity of {total_mib / 1024:.2f} GiB of which {free_mib / 1024:.2f} GiB is free."
    )


def mps_cap_mib():
    """The MPS pinned memory limit for device 0 in MiB, or None (format `0=2048M` or `2G`)."""
    text = os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "")
    for part in text.split(","):
        value = part.split("=", 1)[-1].strip().upper()
        if not value:
            continue
        scale = {"G": 1024, "M": 1, "K": 1 / 1024}.get(value[-1], 1 / 2**20)
        number = value[:-1] if value[-1] in "GMK" else value
        try:
            return float(number) * scale
        except ValueError:
            return None
    return None


def alive(pid):
    """Whether `pid` is a process that has not exited (a zombie holds no GPU memory)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def hold_fake(directory, mib):
    """Records that this process holds `mib` MiB of the fake GPU (atomically: the refresher
    never reads half a figure)."""
    tmp = os.path.join(directory, f".tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(str(mib))
    os.replace(tmp, os.path.join(directory, f"mem-{os.getpid()}"))


class FakeGpu:
    """A fake GPU in a directory; the kit and its jobs share it through FAKE_ENV."""

    def __init__(self, directory):
        self.dir = directory
        self.file = os.path.join(directory, "gpus.json")
        self.energy_mj = 0
        self.last = time.time()

    def create(self):
        os.makedirs(self.dir, exist_ok=True)
        self.refresh(busy=False)
        return self

    def holders(self):
        """{pid: MiB} of the live processes that hold fake memory; a dead one's ledger is
        removed (its memory is free again)."""
        held = {}
        for name in os.listdir(self.dir):
            if not name.startswith("mem-"):
                continue
            try:
                pid = int(name[4:])
            except ValueError:
                continue
            if not alive(pid):
                try:
                    os.remove(os.path.join(self.dir, name))
                except FileNotFoundError:
                    pass
                continue
            try:
                with open(os.path.join(self.dir, name)) as f:
                    held[pid] = float(f.read() or 0)
            except (FileNotFoundError, ValueError):
                pass
        return held

    def held_mib(self):
        return sum(self.holders().values())

    def refresh(self, busy=None):
        """Writes what a probe reads now: memory from the ledger, activity from whether any
        process holds memory, and each holder as a compute process with its own memory; the
        energy counter integrates the power."""
        holders = self.holders()
        held = sum(holders.values())
        busy = held > 0 if busy is None else busy
        now = time.time()
        power = 310.0 if busy else 70.0
        self.energy_mj += int(power * (now - self.last) * 1000)
        self.last = now
        gpu = {
            "uuid": FAKE_UUID,
            "name": FAKE_NAME,
            "memory_total_mib": FAKE_TOTAL_MIB,
            "memory_used_mib": int(min(held, FAKE_TOTAL_MIB - FAKE_RESERVED_MIB)),
            "memory_reserved_mib": FAKE_RESERVED_MIB,
            "sm_active": 0.62 if busy else 0.0,
            "util_gpu": 1.0 if busy else 0.0,
            "sm_occupancy": 0.31 if busy else 0.0,
            "power_w": power,
            "energy_mj": self.energy_mj,
            "processes": [{"pid": pid, "used_mib": int(min(mib, FAKE_TOTAL_MIB))}
                          for pid, mib in sorted(holders.items())],
        }
        tmp = self.file + ".tmp"
        with open(tmp, "w") as f:
            json.dump([gpu], f)
        os.replace(tmp, self.file)
        return gpu


class Hardware:
    """Real or fake, the same calls."""

    def __init__(self, dry, out_dir):
        self.dry = dry
        self.fake = FakeGpu(os.path.join(out_dir, "fake-gpu")).create() if dry else None
        self._fields = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if dry:
            threading.Thread(target=self._keep_current, name="fake-gpu", daemon=True).start()

    def _keep_current(self):
        """The dry run's hardware: the fake file follows the ledger every REFRESH_S."""
        while not self._stop.wait(REFRESH_S):
            try:
                self._refresh()
            except OSError:
                pass  # the kit is removing its scratch folders at the end

    def _refresh(self):
        with self._lock:
            return self.fake.refresh()

    def stop(self):
        self._stop.set()

    def carma_gpus_setting(self):
        return f"fake:{self.fake.file}" if self.dry else "nvml"

    def job_env(self):
        """Environment a job needs to reach this hardware."""
        return {FAKE_ENV: self.fake.dir} if self.dry else {}

    def before_tick(self):
        if self.dry:
            self._refresh()

    def smi(self):
        """nvidia-smi --query-gpu for GPU 0, as a dict of SMI_FIELDS (strings, units stripped);
        from the fake file in a dry run."""
        if self.dry:
            g = self._refresh()
            free = g["memory_total_mib"] - g["memory_used_mib"] - g["memory_reserved_mib"]
            values = [0, g["uuid"], g["name"], g["memory_total_mib"], g["memory_used_mib"],
                      g["memory_reserved_mib"], free, round(g["util_gpu"] * 100), g["power_w"], "[N/A]"]
            row = dict(zip(SMI_FIELDS, [str(v) for v in values]))
            row["total_energy_consumption"] = str(g["energy_mj"])
            return row
        fields = self.smi_fields()
        out = subprocess.run(
            ["nvidia-smi", "--id=0", "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip().splitlines()[0]
        row = {f: "[not a field of this nvidia-smi]" for f in SMI_FIELDS + SMI_OPTIONAL}
        row.update(zip(fields, [v.strip() for v in out.split(",")]))
        return row

    def smi_fields(self):
        """The fields this nvidia-smi answers: one unknown field fails the whole query (exit 2),
        and versions differ (the first real run found one missing), so each is tried once."""
        if self._fields is None:
            self._fields = [
                f for f in SMI_FIELDS + SMI_OPTIONAL
                if subprocess.run(["nvidia-smi", "--id=0", f"--query-gpu={f}", "--format=csv,noheader"],
                                  capture_output=True, timeout=30).returncode == 0
            ]
        return self._fields

    def mps_control(self):
        """The MPS control program, or None with the reason."""
        if self.dry:
            return None, "fake GPU: the cap is enforced by the fake allocator instead (same job, same variable)"
        path = shutil.which("nvidia-cuda-mps-control")
        return (path, None) if path else (None, "nvidia-cuda-mps-control not on PATH")

    def torch_device(self):
        return "cpu" if self.dry else "cuda"
