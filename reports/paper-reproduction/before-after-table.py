#!/usr/bin/env python3
"""Markdown table of before-after.sh: the configuration before issue 15 (commit 6182724's binary,
configs/carma-before.toml) and the recommended one, on the same K jittered copies, at the default
model and at MPS eta = 1.05, each against exclusive on the same copies.

Usage: python3 reports/paper-reproduction/before-after-table.py reports/paper-reproduction
(reads before-after/ and jittered/<trace>/carma-gpumemnet.json)
"""
import json
import os
import statistics
import sys


def spread(values):
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):+.1f} ± {sd:.1f}"


def row(label, runs, baselines):
    mk = [100 * (r["makespan_h"] / b["makespan_h"] - 1) for r, b in zip(runs, baselines)]
    en = [100 * (r["energy_mj"] / b["energy_mj"] - 1) for r, b in zip(runs, baselines)]
    jct = [100 * (r["jct_mean_min"] / b["jct_mean_min"] - 1) for r, b in zip(runs, baselines)]
    ooms = statistics.mean(r["ooms"] for r in runs)
    lost = max(r["lost_tasks"] for r in runs)
    hours = statistics.mean(r["makespan_h"] for r in runs)
    return f"| {label} | {hours:.2f} | {spread(mk)} | {spread(jct)} | {spread(en)} | {ooms:.1f} | {lost} |"


def main():
    root = sys.argv[1]
    print("| trace, model, configuration | makespan h | makespan vs exclusive % | mean JCT vs exclusive % | energy vs exclusive % | OOMs per run | lost tasks (max) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for trace in ("philly_heavy_60", "philly_mix_90"):
        for model, after_path in (("default", f"jittered/{trace}/carma-gpumemnet.json"),
                                  ("eta 1.05", f"before-after/{trace}-eta105-after.json")):
            after = json.load(open(os.path.join(root, after_path)))
            suffix = "" if model == "default" else "-eta105"
            before = [json.loads(l) for l in open(os.path.join(root, f"before-after/{trace}{suffix}-before.jsonl"))]
            runs = after["runs"]
            assert [b["seed"] for b in before] == [r["seed"] for r in runs], "the same copies"
            baselines = [r["baseline"] for r in runs]
            print(row(f"{trace}, {model}, before issue 15", before, baselines))
            print(row(f"{trace}, {model}, recommended", [r["run"] for r in runs], baselines))


if __name__ == "__main__":
    main()
