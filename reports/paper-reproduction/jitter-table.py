#!/usr/bin/env python3
"""Markdown table of jitter.sh's results: per trace and row, the mean ± standard deviation
[min, max] over the copies of makespan, mean JCT and energy against exclusive on the same
copies, and OOMs and lost tasks per run.

Usage: python3 reports/paper-reproduction/jitter-table.py DIR   (DIR/<trace>/<row>.json)
"""
import json
import os
import sys

ROWS = ["exclusive", "rr-streams", "rr-mps", "magm-recovery", "lug-recovery", "magm-horus",
        "magm-faketensor", "magm-gpumemnet", "magm-oracle", "carma-gpumemnet", "carma-oracle"]


def pct(s):
    return f"{s['mean']:+.1f} ± {s['sd']:.1f} [{s['min']:+.1f}, {s['max']:+.1f}]"


def main():
    root = sys.argv[1]
    for trace in sorted(os.listdir(root)):
        first = None
        lines = []
        for row in ROWS:
            path = os.path.join(root, trace, row + ".json")
            if not os.path.exists(path):
                continue
            s = json.load(open(path))
            first = first or s
            v, r = s["versus_exclusive"], s["run"]
            lines.append(f"| {row} | {r['makespan_h']['mean']:.2f} ± {r['makespan_h']['sd']:.2f} | "
                         f"{pct(v['makespan_pct'])} | {pct(v['jct_mean_pct'])} | {pct(v['energy_pct'])} | "
                         f"{r['ooms']['mean']:.1f} [{r['ooms']['min']:.0f}, {r['ooms']['max']:.0f}] | "
                         f"{r['lost_tasks']['mean']:.1f} |")
        if first is None:
            continue
        e = first["exclusive"]
        print(f"**{trace}**: {first['copies']} copies, arrivals jittered by ±{first['jitter_s']:.0f} s, seed "
              f"{first['seed']}; exclusive on the same copies: makespan {e['makespan_h']['mean']:.2f} ± "
              f"{e['makespan_h']['sd']:.2f} h, energy {e['energy_mj']['mean']:.2f} ± {e['energy_mj']['sd']:.2f} MJ.")
        print()
        print("| row | makespan h | makespan vs exclusive % | mean JCT vs exclusive % | energy vs exclusive % | OOMs per run | lost tasks |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        print("\n".join(lines))
        print()


if __name__ == "__main__":
    main()
