#!/usr/bin/env python3
"""Where a simulated run loses time against the throughput bound, in hours of all four GPUs.

Under MPS a GPU whose jobs' standalone SM activity sums to S delivers S units of work per unit
of time with one job, and min(S, eta) / (1 + epsilon) with several (traces/sim-model.toml), so
at most eta / (1 + epsilon) ~ 1.05. This script replays a journal's placements and ends
against the workloads' standalone SM activity (the simulator's truth from the profiles: an
analysis of the run, never an input of the scheduler) and sums, per GPU and interval, what it
delivered below that bound, by cause:

  tail     no task waiting any more (the end of the run);
  idle     a task waiting and the GPU empty;
  startup  a task waiting and the GPU's only jobs still starting (no progress for 40 s);
  alone    a task waiting and one job computing on the GPU;
  under    a task waiting and several jobs summing below eta.

makespan ~ total work / (4 GPUs x bound) + the sum of these. Usage:
  python3 reports/paper-reproduction/losses.py CARMA PROFILES_CSV JOURNAL... [--eta 1.10 --epsilon 0.05 --startup-s 40]
"""
import argparse
import collections
import json
import os
import shutil
import subprocess
import tempfile


def events(carma, journal):
    home = tempfile.mkdtemp(prefix="carma-losses-")
    try:
        subprocess.run([carma, "init", "--home", home], check=True, capture_output=True)
        shutil.copy(journal, os.path.join(home, "carma.redb"))
        # Readers answer from the view a tick publishes; this tick finds no task to act on
        # (every one has ended) and no GPU, so it adds no event about a task.
        with open(os.path.join(home, "config.toml"), "w") as config:
            config.write('[tick]\ngpus = "none"\n')
        subprocess.run([carma, "tick", "--home", home], check=True, capture_output=True)
        out = subprocess.run([carma, "events", "--home", home, "--json"], check=True, capture_output=True,
                             text=True).stdout
    finally:
        shutil.rmtree(home)
    return [e for e in map(json.loads, out.splitlines()) if e["kind"] != "MetricSample"]


def attempts(evs):
    """Per task: workload name, submit time, attempts as (gpus, start, end), in seconds."""
    tasks = {}
    t0 = evs[0]["time_ms"] / 1000
    for e in evs:
        t, d = e["time_ms"] / 1000 - t0, e["data"]
        if e["kind"] == "Submitted":
            tasks[e["task"]] = {"name": d["spec"]["name"], "sub": t, "att": []}
        elif e["kind"] == "Placed":
            tasks[e["task"]]["att"].append([d["gpus"], t, None])
        elif e["kind"] in ("Finished", "OomDetected", "Failed", "Lost", "Stopped") and tasks[e["task"]]["att"]:
            att = tasks[e["task"]]["att"][-1]
            att[2] = att[2] if att[2] is not None else t
    return tasks


def losses(tasks, sm, gpus, eta, epsilon, startup_s):
    bound = eta / (1 + epsilon)
    spans = [(g, a[1], a[2], T) for T in tasks.values() for a in T["att"] if a[2] is not None for g in a[0]]
    times = sorted({x for _, s, e, _ in spans for x in (s, s + startup_s, e)} | {T["sub"] for T in tasks.values()})
    first_start = {id(T): min(a[1] for a in T["att"]) for T in tasks.values() if T["att"]}
    end = max(e for _, _, e, _ in spans)
    lost = collections.Counter()
    for t, t_next in zip(times, times[1:]):
        if t >= end:
            break
        mid = (t + t_next) / 2
        waiting = any(T["sub"] <= mid < first_start.get(id(T), float("inf")) for T in tasks.values())
        for g in gpus:
            on = [(s, T) for gg, s, e, T in spans if gg == g and s <= mid < e]
            computing = [sm[T["name"]] for s, T in on if mid >= s + startup_s]
            total = sum(computing)
            delivered = total if len(computing) <= 1 else min(total, eta) / (1 + epsilon)
            if not waiting:
                cause = "tail"
            elif not on:
                cause = "idle"
            elif not computing:
                cause = "startup"
            elif len(computing) == 1:
                cause = "alone"
            else:
                cause = "under"
            lost[cause] += max(0.0, bound - delivered) * (t_next - t)
    scale = 3600 * len(gpus) * bound
    first_submit = min(T["sub"] for T in tasks.values())
    return (end - first_submit) / 3600, {k: v / scale for k, v in lost.items()}


def standalone_sm(profiles):
    """Each workload's standalone SM activity, from the profiles CSV (smact_assumed)."""
    sm = {}
    lines = open(profiles).read().splitlines()
    header = lines[0].split(",")
    for line in lines[1:]:
        cells = line.split(",")
        if len(cells) == len(header):
            row = dict(zip(header, cells))
            sm[row["workload"]] = float(row["smact_assumed"])
    return sm


def main():
    p = argparse.ArgumentParser()
    p.add_argument("carma")
    p.add_argument("profiles")
    p.add_argument("journals", nargs="+")
    p.add_argument("--eta", type=float, default=1.10)
    p.add_argument("--epsilon", type=float, default=0.05)
    p.add_argument("--startup-s", type=float, default=40.0)
    args = p.parse_args()
    sm = standalone_sm(args.profiles)
    causes = ["tail", "idle", "startup", "alone", "under"]
    print("| journal | makespan h | " + " | ".join(causes) + " | total |")
    print("|---|---:|" + "---:|" * (len(causes) + 1))
    for journal in args.journals:
        tasks = attempts(events(args.carma, journal))
        gpus = sorted({g for T in tasks.values() for a in T["att"] for g in a[0]})
        makespan, lost = losses(tasks, sm, gpus, args.eta, args.epsilon, args.startup_s)
        cells = " | ".join(f"{lost.get(c, 0.0):.3f}" for c in causes)
        print(f"| {os.path.basename(journal)} | {makespan:.3f} | {cells} | {sum(lost.values()):.3f} |")


if __name__ == "__main__":
    main()
