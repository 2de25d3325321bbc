#!/usr/bin/env python3
"""The table of order.sh: per configuration, trace and regime of declared time limits, the
mean and spread over every copy of every seed against exclusive, and against the row named
`today` (main's carma.toml, run by main's binary) copy by copy.

    python3 reports/paper-reproduction/order-table.py reports/paper-reproduction/order

Reads DIR/<config>/<trace>-<regime>-seed<S>.json (carma.simulate-copies/1). A row whose folder
holds a file `reference` (one line: another row's name) is compared with that row instead of
`today`: rows run by a later binary are paired with today's configuration run by the same
binary."""
import glob
import json
import os
import statistics
import sys

TRACES = ["philly_heavy_60", "philly_mix_90"]
REGIMES = ["default", "none", "loose", "exact"]


def load(directory):
    rows = {}
    for path in sorted(glob.glob(os.path.join(directory, "*", "*.json"))):
        config = os.path.basename(os.path.dirname(path))
        trace, regime, seed = os.path.basename(path)[:-5].rsplit("-", 2)
        data = json.load(open(path))
        assert data["schema"] == "carma.simulate-copies/1", path
        rows.setdefault((config, trace, regime), {})[seed] = data["runs"]
    return rows


def pct(run, base, key):
    return (run[key] / base[key] - 1.0) * 100.0


def spread(values):
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):+.1f} ± {sd:.1f} [{min(values):+.1f}, {max(values):+.1f}]"


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "reports/paper-reproduction/order"
    rows = load(directory)
    references = {}
    for path in glob.glob(os.path.join(directory, "*", "reference")):
        references[os.path.basename(os.path.dirname(path))] = open(path).read().strip()
    configs = sorted({c for c, _, _ in rows}, key=lambda c: (c != "today", c))
    print("| config | trace | limits | copies | makespan vs excl. % | mean JCT vs excl. % | energy vs excl. % | "
          "longest 1-GPU wait min | OOMs/run (max) | lost (max) | makespan beats today |")
    print("|---|---|---|---:|---|---|---|---:|---:|---:|---:|")
    for trace in TRACES:
        for regime in REGIMES:
            for config in configs:
                seeds = rows.get((config, trace, regime))
                if not seeds:
                    continue
                reference = references.get(config, "today")
                today = rows.get((reference, trace, regime), {})
                runs = [r for s in sorted(seeds) for r in seeds[s]]
                makespan = [pct(r["run"], r["baseline"], "makespan_h") for r in runs]
                jct = [pct(r["run"], r["baseline"], "jct_mean_min") for r in runs]
                energy = [pct(r["run"], r["baseline"], "energy_mj") for r in runs]
                waits = [r["run"].get("wait_1gpu_max_min") for r in runs]
                wait = f"{statistics.mean(waits):.0f}" if None not in waits else "—"
                ooms = statistics.mean(r["run"]["ooms"] for r in runs)
                oom_max = max(r["run"]["ooms"] for r in runs)
                lost = max(r["run"]["lost_tasks"] for r in runs)
                beats = "—"
                if config != reference and not config.startswith("today") and today:
                    pairs = [(a, b) for s in sorted(seeds) for a, b in zip(seeds[s], today.get(s, []))]
                    for a, b in pairs:
                        assert a["seed"] == b["seed"], "paired copies share their seed"
                    won = sum(1 for a, b in pairs if a["run"]["makespan_h"] < b["run"]["makespan_h"])
                    beats = f"{won}/{len(pairs)}" + ("" if reference == "today" else f" ({reference})")
                print(f"| {config} | {trace} | {regime} | {len(runs)} | {spread(makespan)} | {spread(jct)} | "
                      f"{spread(energy)} | {wait} | {ooms:.1f} ({oom_max}) | {lost} | {beats} |")


if __name__ == "__main__":
    main()
