#!/usr/bin/env python3
"""Markdown table of preempt.sh's results: per trace and configuration, over every copy of
every seed found, the mean makespan and energy against exclusive on the same copies (with the
per-set means), OOMs and lost tasks per run (mean and max), preemptions, checkpoints, the
GPU-hours of progress lost and the GPU-hours spent restarting per run.

Usage: python3 reports/paper-reproduction/preempt-table.py DIR   (DIR/<trace>-<config>-k<K>-seed<S>.json)
"""
import json
import os
import re
import sys


def main():
    root = sys.argv[1]
    groups = {}
    for name in sorted(os.listdir(root)):
        m = re.fullmatch(r"(philly_\w+?_\d+)-(.+)-k(\d+)-seed(\d+)\.json", name)
        if m:
            groups.setdefault((m[1], m[2]), []).append((int(m[4]), json.load(open(os.path.join(root, name)))))
    print("| trace | config | copies | makespan vs excl. % (per seed) | energy vs excl. % | OOMs/run mean (max) | lost tasks (max) | preemptions/run | checkpoints/run | lost GPU-h/run | restart GPU-h/run |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for (trace, config), sets in sorted(groups.items()):
        runs = [r for _, s in sets for r in s["runs"]]
        n = len(runs)

        def pct(key):
            return sum((r["run"][key] / r["baseline"][key] - 1) * 100 for r in runs) / n

        def mean(key):
            return sum(r["run"][key] for r in runs) / n

        per_seed = ", ".join(f"{s['versus_exclusive']['makespan_pct']['mean']:+.1f}" for _, s in sorted(sets, key=lambda x: x[0]))
        print(f"| {trace} | {config} | {n} | **{pct('makespan_h'):+.1f}** ({per_seed}) | {pct('energy_mj'):+.1f} | "
              f"{mean('ooms'):.2f} ({max(r['run']['ooms'] for r in runs)}) | {max(r['run']['lost_tasks'] for r in runs)} | "
              f"{mean('preemptions'):.1f} | {mean('checkpoints'):.1f} | {mean('lost_gpu_h'):.2f} | {mean('restart_gpu_h'):.2f} |")


if __name__ == "__main__":
    main()
