#!/usr/bin/env python3
"""Where the held-out over-provisioning and under-estimates come from (issue 24).

Reads the per-row predictions of `carma-train cv --predictions FILE` (one file per seed) and
prints, per seed: the pooled figures; the split by bound (calibrated / below-spread /
whole-card); the share of the mean over-provisioning carried by the worst rows; and the
families that carry most of the mean and of the under-estimates. Standard library only.

Given the CV report as well (`PRED.csv:CV.json`), it also rebuilds each row's fold (the same
SplitMix64 shuffle of families as `carma-train`'s `grouped_folds`), takes each fold's
conformal factor out of the calibrated rows' upper figures, and rescores them with one factor
for every fold and every seed: if the seeds then agree, their spread comes from the per-fold
factor, not from the networks.

    python3 reports/estimator/real-models-diagnose.py \
        /tmp/pred-seed1.csv:reports/estimator/real-models-cv-bounded-seed1.json ...
"""
import csv
import json
import sys
from collections import defaultdict

MASK = (1 << 64) - 1


class SplitMix64:
    """estimator-training/src/data.rs `Rng`."""

    def __init__(self, seed):
        self.state = (seed ^ 0x9E3779B97F4A7C15) & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def shuffle(self, items):
        for i in range(len(items) - 1, 0, -1):
            j = self.next() % (i + 1)
            items[i], items[j] = items[j], items[i]


def fold_of(families, k, seed):
    """`data::grouped_folds`: sorted families, shuffled, dealt round-robin."""
    groups = sorted(set(families))
    SplitMix64(seed).shuffle(groups)
    return {g: i % k for i, g in enumerate(groups)}


def one_factor(rows, report, factor):
    """(under %, mean over %) with every fold's calibrated rows at `factor`."""
    factors = report["upper_factor_per_fold"]
    folds = fold_of([r["family"] for r in rows], report["folds"], report["seed"])
    unders, overs = 0, []
    for r in rows:
        upper = float(r["upper_mib"])
        if r["bound"] == "calibrated":
            raw = upper / factors[folds[r["family"]]]
            upper = max(raw * factor, float(r["point_mib"]))
        label = float(r["label_mib"])
        unders += upper < label
        if r["censored"] != "true":
            overs.append(max(0.0, upper - label) / label * 100.0)
    return unders / len(rows) * 100.0, sum(overs) / len(overs)

CAPACITY = 40000.0


def load(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def judge(r):
    """(under, over % of actual or None for censored)."""
    upper = float(r["upper_mib"])
    if r["censored"] == "true":
        return upper < CAPACITY, None
    label = float(r["label_mib"])
    return upper < label, max(0.0, upper - label) / label * 100.0


def summary(rows):
    unders = sum(judge(r)[0] for r in rows)
    overs = [o for o in (judge(r)[1] for r in rows) if o is not None]
    mean = sum(overs) / len(overs) if overs else 0.0
    big = sum(o > 500.0 for o in overs)  # over by more than 5x its peak
    worst = max(overs, default=0.0)
    return len(rows), unders, mean, big, worst, overs


def main(args):
    fixed = []
    for arg in args:
        path, _, report_path = arg.partition(":")
        rows = load(path)
        if report_path:
            with open(report_path) as f:
                report = json.load(f)
            fixed.append((path, rows, report))
        n, unders, mean, big, worst, overs = summary(rows)
        labelled = len(overs)
        print(f"== {path}: {n} runs, unders {unders} ({unders / n:.2%}), mean over {mean:.1f}%, "
              f"runs > 5x {big}, worst {worst:.0f}%")
        by_bound = defaultdict(list)
        for r in rows:
            by_bound[r["bound"]].append(r)
        for bound, rs in sorted(by_bound.items()):
            bn, bu, bm, bb, bw, bo = summary(rs)
            share = sum(bo) / labelled
            print(f"  {bound:12} {bn:5} runs, unders {bu:3}, mean over {bm:7.1f}%, > 5x {bb}, "
                  f"worst {bw:.0f}%, adds {share:.2f} points to the pooled mean")
        ordered = sorted(overs, reverse=True)
        for k in (5, 10, 30):
            print(f"  the worst {k} rows carry {sum(ordered[:k]) / labelled:.2f} points of the mean; "
                  f"without them the mean is {sum(ordered[k:]) / (labelled - k):.1f}%")
        fam = defaultdict(list)
        for r in rows:
            fam[r["family"]].append(r)
        rows_f = []
        for f, rs in fam.items():
            fn, fu, fm, fb, fw, fo = summary(rs)
            rows_f.append((sum(fo) / labelled, f, fn, fu, fm, fb))
        print("  families carrying most of the mean (points of the pooled mean, runs, unders, mean %, > 5x):")
        for share, f, fn, fu, fm, fb in sorted(rows_f, reverse=True)[:8]:
            print(f"    {f:24} {share:5.2f}  {fn:4} {fu:3} {fm:7.1f}% {fb}")
        print("  families with the most under-estimates:")
        for share, f, fn, fu, fm, fb in sorted(rows_f, key=lambda t: -t[3])[:8]:
            if fu:
                print(f"    {f:24} {fu:3} of {fn}")
        print("  rows over by more than 5x:")
        for r in rows:
            u, o = judge(r)
            if o is not None and o > 500.0:
                print(f"    {r['model']} @{r['batch_size']} {r['bound']}: label {r['label_mib']}, "
                      f"point {r['point_mib']}, upper {r['upper_mib']} ({o:.0f}%)")
        print("  non-calibrated rows under-estimated:")
        for r in rows:
            u, o = judge(r)
            if u and r["bound"] != "calibrated":
                print(f"    {r['model']} @{r['batch_size']} {r['bound']}: label {r['label_mib']}, "
                      f"point {r['point_mib']}, upper {r['upper_mib']}")

    if fixed:
        print("== one factor for every fold (calibrated rows; the others as decided):")
        print("  per-fold factors: " + "; ".join(
            f"seed {rep['seed']}: " + ", ".join(f"{x:.2f}" for x in rep["upper_factor_per_fold"])
            for _, _, rep in fixed))
        for factor in (1.2, 1.3, 1.4, 1.5):
            cells = [one_factor(rows, rep, factor) for _, rows, rep in fixed]
            print(f"  x {factor}: " + "; ".join(
                f"seed {rep['seed']} {u:.2f}% under, {m:.1f}% over"
                for (_, _, rep), (u, m) in zip(fixed, cells)))
        for _, rows, rep in fixed:
            factor = 1.0
            while one_factor(rows, rep, factor)[0] > 1.0:
                factor += 0.01
            u, m = one_factor(rows, rep, factor)
            print(f"  seed {rep['seed']}: <= 1% under first at one factor {factor:.2f}: {u:.2f}% under, {m:.1f}% over")


if __name__ == "__main__":
    main(sys.argv[1:])
