#!/usr/bin/env python3
"""Issue 40's before/after table (relaunch.md) from relaunch.sh's output.

usage: relaunch-table.py CARMA BEFORE_DIR AFTER_DIR

For each trace and row: the mean makespan, JCT and energy over the K jittered copies (and the
out-of-memory deaths), before and after; then, from the one journal of the unjittered trace per
row, the stops for memory (attempts that ended "stopped over its GPU memory share"), the
relaunches that followed, and the GPU-hours those stopped attempts had run (lost work: the
simulated jobs do not checkpoint in these rows). CARMA reads the journals (`carma report
--journal J --tasks --json`).
"""
import json
import subprocess
import sys
from pathlib import Path

ROWS = ["magm-gpumemnet", "magm-gpumemnet-enforced", "carma-gpumemnet"]
TRACES = ["philly_heavy_60", "philly_mix_90"]


def copies(path):
    run = json.loads(path.read_text())["run"]
    return {k: run[k]["mean"] for k in ("makespan_h", "jct_mean_min", "energy_mj", "ooms")}


def stops(carma, journal):
    if not journal.exists():
        return None
    out = subprocess.run([carma, "report", "--journal", str(journal), "--tasks", "--json"],
                         check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    reports = report["reports"] if "reports" in report else [report]
    attempts = reports[0]["attempts"]
    stopped = [a for a in attempts if "stopped over its GPU memory share" in (a.get("outcome") or "")]
    gpu_h = sum(((a["end_s"] or 0) - (a["start_s"] or 0)) * len(a["gpus"]) for a in stopped) / 3600
    relaunched = {a["task"] for a in stopped}
    finished = {a["task"] for a in attempts if a.get("outcome") == "exit 0"}
    return len(stopped), len(relaunched & finished), gpu_h


def main():
    carma, before, after = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    for trace in TRACES:
        print(f"\n**{trace}** (means over the jittered copies; stops from the unjittered run)\n")
        print("| row | makespan h before → after | JCT min before → after | energy MJ before → after "
              "| OOM deaths before → after | stops (of them Finished after) | stopped GPU-h |")
        print("|---|---|---|---|---|---|---|")
        for row in ROWS:
            # Before issue 40 the simulator never enforced memory: the enforced row's "before"
            # is the same run as magm-gpumemnet's.
            known = before / trace / f"{row}.json"
            b = copies(known if known.exists() else before / trace / "magm-gpumemnet.json")
            a = copies(after / trace / f"{row}.json")
            s = stops(carma, after / trace / f"{row}.redb")
            s_text = "—" if s is None else f"{s[0]} ({s[1]})"
            gpu_h = "—" if s is None else f"{s[2]:.2f}"
            print(f"| {row} | {b['makespan_h']:.2f} → {a['makespan_h']:.2f} "
                  f"| {b['jct_mean_min']:.1f} → {a['jct_mean_min']:.1f} "
                  f"| {b['energy_mj']:.2f} → {a['energy_mj']:.2f} "
                  f"| {b['ooms']:.1f} → {a['ooms']:.1f} | {s_text} | {gpu_h} |")


if __name__ == "__main__":
    main()
