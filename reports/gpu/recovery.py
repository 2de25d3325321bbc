"""The GPU kit's recovery cases (issue 40): a job that ends for its GPU memory is relaunched
with what it needs, and the only right ending is Finished after a relaunch.

- **under-declared** (`underdeclared`): a job that declared far less than it uses, beside a
  neighbour on the same GPU. The tick reads the job's own processes over its share plus the
  margin (MemoryExceeded), stops it, and queues it again at its place in the main queue with
  at least what it used; the second attempt fits and finishes. The neighbour runs once: one
  attempt, Finished, never stopped, never out of memory.
- **out of memory between two ticks** (`oom_early`): a process outside carma fills the card
  but what the job declared plus the placement margin; the job holds its share less 1 GiB,
  and 1.5 s into its training one more allocation does not fit: the CUDA allocator (or the
  fake one) fails, and the job dies at once. The kit does not tick while the job's process
  lives, so the tick's readings never see it (the tick that launched it read the GPU before
  the launch, the next one comes after the exit, as a 5 s timer tick would for an
  out-of-memory 2 s in): only the root supervisor's own readings (every 500 ms) hold the
  evidence. OomDetected, then the recovery queue (carma's miss: the job stayed within its
  share and the card filled around it); the filler then ends, as another user's job does,
  and the relaunch finishes.

`classify` names any task's ending from carma's own records, for these cases and the queue
section: anything but Finished after a relaunch (a stop for memory without one, a failure, a
task never stopped) is a wrong ending of a job that outgrew its memory.
"""

import json
import os
import select
import subprocess
import time

# What carma did to a task's memory, from `carma events --json`.
MEMORY_KINDS = ("MemoryExceeded", "OomDetected", "Requeued")
TERMINAL = ("finished", "failed", "cancelled")
# Case (b)'s job: what it declares, what it holds through the allocator after one step (its
# share less 1 GiB: with a real card's CUDA context, which NVML counts as the job's, still
# within its share), and the allocation that then does not fit beside the filler. The filler
# leaves the share plus the placement's margin (`[sched] margin-with-figure-mib`, set to 512 MiB
# on this case's queue) plus 512 MiB free, so that with the job's memory the card is over 95 %
# full (the tick's reading before the job: under 90 %).
OOM_SHARE_MIB = 8192
OOM_OWN_MIB = OOM_SHARE_MIB - 1024
OOM_MORE_MIB = 4096
OOM_MARGIN_MIB = 512
OOM_LEAVE_MIB = OOM_SHARE_MIB + OOM_MARGIN_MIB + 512


def story(events, task_id):
    """What carma recorded of a task's memory: its MemoryExceeded reasons, OomDetected records
    and Requeued records (each `data` as `events --json` gives it)."""
    mine = [e for e in events if e.get("task") == task_id and e.get("kind") in MEMORY_KINDS]
    return {
        "memory_exceeded": [e["data"].get("reason") for e in mine if e["kind"] == "MemoryExceeded"],
        "oom": [e["data"] for e in mine if e["kind"] == "OomDetected"],
        "requeued": [e["data"] for e in mine if e["kind"] == "Requeued"],
    }


def classify(task, told):
    """The ending of a task from its final state and its `story`: "finished after a relaunch"
    is the only right one for a job that outgrew its memory."""
    state, attempts = task["state"].lower(), task["attempts"]
    memory_end = bool(told["memory_exceeded"] or told["oom"])
    relaunched = any(r.get("requirement_mib") is not None for r in told["requeued"])
    if state == "finished" and attempts >= 2 and memory_end and relaunched:
        return "finished after a relaunch"
    if memory_end and not relaunched:
        return f"stopped for memory without a relaunch, then {state}"
    if memory_end:
        return f"relaunched, then {state} after {attempts} attempt(s)"
    return f"{state} after {attempts} attempt(s), never stopped for memory"


def untouched(task, told):
    """A neighbour left alone: one attempt, Finished, nothing of its memory recorded."""
    return (task["state"].lower() == "finished" and task["attempts"] == 1
            and not (told["memory_exceeded"] or told["oom"] or told["requeued"]))


def first_line(process, seconds):
    """The first line `process` prints within `seconds` ("" when none came)."""
    ready, _, _ = select.select([process.stdout], [], [], seconds)
    return process.stdout.readline().strip() if ready else ""


def tagged_processes(tag):
    """Pids of the processes whose command line holds `--tag TAG` (the kit runs as root or as
    the jobs' user: it can read every command line it needs)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--tag" in argv and tag.encode() in argv:
            pids.append(int(name))
    return pids


class Cases:
    """The two cases on one kit (its carma, hardware, deadline and helpers)."""

    def __init__(self, kit):
        self.kit = kit
        self.total = float(kit.hw.smi()["memory.total"])

    def snapshot(self, home, ids):
        """(tasks by name, events) now."""
        k = self.kit
        q = json.loads(k.carma_cmd(home, "queue", "--all", "--json").stdout)["tasks"]
        events = [json.loads(line) for line in k.carma_cmd(home, "events", "--json").stdout.splitlines() if line]
        return {ids.get(t["id"], t["id"]): t for t in q}, events

    def submit(self, home, name, mem, argv):
        r = self.kit.carma_cmd(home, "submit", "--parsable", "--name", name, "--gpus", "1", "--mem", mem,
                               "--max-retries", "2", "--", *argv)
        return r.stdout.strip()

    def result(self, home, ids, extra):
        tasks, events = self.snapshot(home, ids)
        rows = [{"name": n, "id": t["id"], "state": t["state"], "attempts": t["attempts"], **story(events, t["id"])}
                for n, t in tasks.items()]
        return {**extra, "tasks": rows, "ending": {r["name"]: classify(tasks[r["name"]], r) for r in rows}}

    def drive(self, home, ids, seconds, on_tick=None):
        """Ticks every 2 s until every task has ended or `seconds` (held to the deadline) pass;
        returns the most tasks seen running at once."""
        k = self.kit
        end = time.time() + min(seconds, max(20.0, k.left(reserve=200)))
        most = 0
        while time.time() < end:
            k.tick(home)
            tasks, events = self.snapshot(home, ids)
            most = max(most, sum(t["state"].lower() == "running" for t in tasks.values()))
            if on_tick:
                on_tick(tasks, events)
            if all(t["state"].lower() in TERMINAL for t in tasks.values()):
                break
            time.sleep(2)
        return most

    # --- (a) under-declared, beside a neighbour ----------------------------------------------
    def underdeclared(self):
        k = self.kit
        home = k.new_queue("underdeclared", "\n[sched.recovery]\nmode = \"exclusive\"\n")
        # The neighbour declares what it holds plus 2 GiB and outlives the relaunch; the job
        # declares 5 % of the card, holds 4 % and then 30 %: over its share, never over the card.
        n_steps, u_steps, step_s, grab_after = (80, 40, 0.2, 2) if k.dry else (200, 100, 0.2, 8)
        neighbour_mib = round(0.2 * self.total)
        ids = {}
        ids[self.submit(home, "neighbour", f"{neighbour_mib + 2048}MiB", k.job_argv(
            "--steps", str(n_steps), "--ballast-mib", str(neighbour_mib), "--step-seconds", str(step_s)))] = "neighbour"
        ids[self.submit(home, "under-declared", f"{round(0.05 * self.total)}MiB", k.job_argv(
            "--steps", str(u_steps), "--ballast-mib", str(round(0.04 * self.total)), "--grab-fraction", "0.3",
            "--grab-after", str(grab_after), "--step-seconds", str(step_s)))] = "under-declared"
        most = self.drive(home, ids, 120 if k.dry else 180)
        out = self.result(home, ids, {"max_running_at_once": most})
        rows = {r["name"]: r for r in out["tasks"]}
        ok = (out["ending"]["under-declared"] == "finished after a relaunch"
              and bool(rows["under-declared"]["memory_exceeded"])
              and untouched(rows["neighbour"], rows["neighbour"]) and most >= 2)
        return {"status": "ok" if ok else "unexpected", **out}

    # --- (b) out of memory between two ticks ----------------------------------------------------
    def oom_early(self):
        k = self.kit
        home = k.new_queue("oom-early", f"\n[sched]\nmargin-with-figure-mib = {OOM_MARGIN_MIB}\n"
                                        "\n[sched.recovery]\nmode = \"exclusive\"\n")
        filler = subprocess.Popen(
            k.job_argv("--fill-leaving-mib", str(OOM_LEAVE_MIB)), env=dict(os.environ, **k.hw.job_env()),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            held = first_line(filler, min(60.0, max(1.0, k.left(reserve=150))))
            if not held.startswith("holding"):
                return {"status": f"failed: the filler did not fill the card: {filler.stderr.read()[-300:]}"}
            k.tick(home)  # the tick's reading of the filled card
            job = self.submit(home, "oom-early", f"{OOM_SHARE_MIB}MiB", k.job_argv(
                "--steps", "25", "--top-up-to-mib", str(OOM_OWN_MIB), "--grab-more-mib", str(OOM_MORE_MIB),
                "--grab-after", "1.5", "--step-seconds", "0.2", "--oom-hold-seconds", "0",
                "--tag", "kit-oom-early"))
            ids = {job: "oom-early"}
            k.tick(home)  # reads the GPU, then launches the job
            lived = self.wait_out(home, ids)
            filler_ended = []

            def end_filler(tasks, events):
                if not filler_ended and story(events, tasks["oom-early"]["id"])["oom"]:
                    filler.kill()
                    filler.wait()
                    filler_ended.append(round(time.time() - k.t0, 1))
            self.drive(home, ids, 90 if k.dry else 150, on_tick=end_filler)
        finally:
            if filler.poll() is None:
                filler.kill()
                filler.wait()
        out = self.result(home, ids, {"filler": held, "filler_ended_at_s": (filler_ended or [None])[0],
                                      "first_attempt_lived_s": lived})
        row = out["tasks"][0]
        oom = row["oom"][0] if row["oom"] else {}
        out["oom_peak_mib"] = oom.get("peak_mib")
        out["oom_evidence"] = oom.get("evidence")
        recovery = [r for r in row["requeued"] if r.get("recovery")]
        ok = (out["ending"]["oom-early"] == "finished after a relaunch" and row["attempts"] == 2
              and bool(row["oom"]) and bool(recovery) and not row["memory_exceeded"]
              and (oom.get("peak_mib") or 0) >= OOM_OWN_MIB and lived is not None)
        return {"status": "ok" if ok else "unexpected", **out}

    def wait_out(self, home, ids):
        """Waits, without a tick, for the job's first attempt to start and exit; its lifetime in
        seconds, or None when it did not show up or outlived a minute."""
        appear = time.time() + min(30.0, max(1.0, self.kit.left(reserve=150)))
        while not tagged_processes("kit-oom-early"):
            if time.time() > appear:
                return None
            time.sleep(0.05)
        started = time.time()
        while tagged_processes("kit-oom-early"):
            if time.time() - started > 60 or self.kit.left(reserve=150) < 0:
                return None
            time.sleep(0.05)
        return round(time.time() - started, 1)

    def run(self):
        """Both cases; `ok` only when both end Finished after a relaunch."""
        cases = {}
        for name in ("underdeclared", "oom_early"):
            try:
                cases[name] = getattr(self, name)()
            except Exception as e:  # noqa: BLE001 - one case failing still reports the other
                cases[name] = {"status": f"failed: {e}"}
        bad = [n for n, c in cases.items() if c["status"] != "ok"]
        return {"status": "ok" if not bad else f"unexpected: {', '.join(bad)}", "cases": cases}
