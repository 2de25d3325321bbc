#!/usr/bin/env python3
"""Markdown tables for reports/estimator/real-models.md from `carma-train cv --estimator vision --json` outputs.

Usage: python3 reports/estimator/real-models-tables.py reports/estimator/real-models-cv-seed{1,2,3}.json
The per-family table is of the first file.
"""
import json
import sys


def row(name, m):
    return (f"| {name} | {m['rows']} | {m['censored']} | {m['under_estimates']} ({100 * m['under_estimate_rate']:.2f}%) | "
            f"{m['over_provisioning_mean_mib']:.0f} | {m['over_provisioning_mean_pct']:.1f}% | "
            f"{m['over_provisioning_median_mib']:.0f} | {m['over_provisioning_median_pct']:.1f}% | {m['point_mdape_pct']:.1f}% |")


def main():
    reports = [json.load(open(p)) for p in sys.argv[1:]]
    print("| estimator | runs | censored | under-estimates of upper | over-prov. mean MiB | mean % of actual | "
          "median MiB | median % | MdAPE of point |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in reports:
        print(row(f"carma, seed {r['seed']}", r["overall"]))
    print(row("FakeTensor (same rows)", reports[0]["faketensor"]))
    first = reports[0]
    print()
    print(f"Per family, seed {first['seed']} (held-out predictions; FakeTensor on the same rows):")
    print()
    print("| family | runs | censored | carma under | carma over mean % | carma MdAPE | FakeTensor under | FakeTensor MdAPE |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for f in first["per_family"]:
        c, t = f["carma"], f["faketensor"]
        over = f"{c['over_provisioning_mean_pct']:.1f}%" if c["labelled"] else "—"
        mdape = f"{c['point_mdape_pct']:.1f}%" if c["labelled"] else "—"
        tmdape = f"{t['point_mdape_pct']:.1f}%" if c["labelled"] else "—"
        print(f"| {f['family']} | {c['rows']} | {c['censored']} | {c['under_estimates']} | {over} | {mdape} | "
              f"{t['under_estimates']} | {tmdape} |")


if __name__ == "__main__":
    main()
