"""The domain rules side by side on held-out predictions (issue 24).

    python3 reports/estimator/real-models-domain.py /tmp/pred-seed1.csv [...]

Each CSV is `carma-train cv --estimator vision --predictions` output, made with the default
`--domain bounded` (its `bound` column says which bound each held-out row got). The rule
before issue 24, the whole card for every row outside the spread (`--domain card`), gives the
same figure on calibrated and whole-card rows and at least the 40,000 MiB card on below-spread
rows; this script scores both from the one file, pooled as carma-train does (under-estimate:
upper below the label, or below the capacity for a censored row; over-provisioning over
labelled rows).
"""

import csv
import sys

CAPACITY = 40000.0


def score(rows, upper_of):
    under = over_pct = over5 = labelled = 0
    worst = 0.0
    for r in rows:
        label, upper = float(r["label_mib"]), upper_of(r)
        if upper < label:
            under += 1
        if r["censored"] == "true":
            continue
        labelled += 1
        pct = 100.0 * max(0.0, upper - label) / label
        over_pct += pct
        over5 += pct > 500.0
        worst = max(worst, pct)
    return (f"{len(rows)} | {under} ({100.0 * under / len(rows):.2f}%) | {over_pct / labelled:.1f}% | "
            f"{over5} | {worst:.0f}%")


def main():
    print("| predictions | rule | rows | under-estimates | mean over-provisioning | runs over > 5x | worst |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for path in sys.argv[1:]:
        rows = list(csv.DictReader(open(path)))
        counts = {b: sum(r["bound"] == b for r in rows) for b in ("calibrated", "below-spread", "whole-card")}

        def card(r):
            upper = float(r["upper_mib"])
            return max(upper, CAPACITY) if r["bound"] == "below-spread" else upper
        print(f"| {path} | bounded (this release) | {score(rows, lambda r: float(r['upper_mib']))} |")
        print(f"| {path} | card (before) | {score(rows, card)} |")
        small = [r for r in rows if r["bound"] == "below-spread"]
        if small:
            print(f"| {path}, below-spread rows only | bounded | {score(small, lambda r: float(r['upper_mib']))} |")
            print(f"| {path}, below-spread rows only | card | {score(small, card)} |")
        print(f"\n{path}: bounds {counts}\n", file=sys.stderr)


if __name__ == "__main__":
    main()
