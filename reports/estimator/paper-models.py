#!/usr/bin/env python3
"""The paper's real-world models: every estimator's figure against the measured memory.

Usage: python3 reports/estimator/paper-models.py CARMA_BINARY [PROFILES_CSV] > reports/estimator/paper-models.md

Summaries come from estimator-training/fixtures/paper-models/ (written by dump_model.py, see
its README section); measured memory and the paper's estimator figures from
../shared/traces/workload_profiles.csv (mem_actual_mib, est_horus_mib, est_faketensor_mib,
est_gpumemnet_mib). The language models' sequence length is not recorded in the profiles, so
they are estimated at 128 and at 512 tokens.
"""

import csv
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "estimator-training", "fixtures", "paper-models")

# profile model name -> fixture file (relative to FIXTURES), per-GPU batch size
CNN = [(p, b) for p in ("resnet50", "vgg16", "mobilenet_v2", "efficientnet_b0", "inception_v3", "legacy_xception") for b in (32, 64, 128)]
PROFILE_CNN = {"resnet50": "resnet50", "vgg16": "vgg", "mobilenet_v2": "mobilenet", "efficientnet_b0": "efficientNet",
               "inception_v3": "Inception", "legacy_xception": "Xception"}
TRANSFORMERS = [
    ("BERT_base", "bert-base-uncased", 32),
    ("BERT_large", "bert-large-uncased", 8),
    ("xlnet_base_cased", "xlnet-base-cased", 8),
    ("xlnet_large_cased", "xlnet-large-cased", 4),
    ("gpt2_large", "gpt2-large", 8),
]


def estimate(carma, path):
    out = subprocess.run([carma, "estimate", "--summary", path, "--estimator", "all", "--json"],
                         check=True, capture_output=True, text=True).stdout
    answers = {a["estimator"]: a.get("estimate") for a in json.loads(out)["estimates"]}
    return {k: (v["mib"], v["upper_mib"], v.get("outside_domain")) if v else None for k, v in answers.items()}


def main():
    carma = sys.argv[1]
    profiles = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "..", "shared", "traces", "workload_profiles.csv")
    prof = {}
    for r in csv.DictReader(open(profiles)):
        prof.setdefault(r["model"], r)
    rows = []
    for name, batch in CNN:
        p = prof[f"{PROFILE_CNN[name]}_{batch}"]
        rows.append(("cnn", f"{name} @{batch}", p, os.path.join(FIXTURES, f"{name}_bs{batch}.json")))
    for seq in (128, 512):
        for pname, fname, batch in TRANSFORMERS:
            p = prof[pname]
            rows.append((f"transformer, seq {seq}", f"{fname} @{batch}", p, os.path.join(FIXTURES, f"seq{seq}", f"{fname}_bs{batch}.json")))

    print("| group | model @batch | measured MiB | carma point | carma upper | upper err | in domain | Horus (ours) | "
          "Horus (paper) | FakeTensor (paper) | GPUMemNet (paper) |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    stats = {}
    for group, label, p, path in rows:
        actual = float(p["mem_actual_mib"])
        e = estimate(carma, path)
        point, upper, outside = e["carma"]
        horus = e["horus"][0]
        figures = {"carma upper": upper, "Horus (paper)": float(p["est_horus_mib"]),
                   "FakeTensor (paper)": float(p["est_faketensor_mib"]), "GPUMemNet (paper)": float(p["est_gpumemnet_mib"])}
        for k, v in figures.items():
            s = stats.setdefault((group, k), {"n": 0, "under": 0, "over": []})
            s["n"] += 1
            if v < actual:
                s["under"] += 1
            else:
                s["over"].append(v - actual)
        domain = "no" if outside else "yes"
        print(f"| {group} | {label} | {actual:.0f} | {point} | {upper} | {100 * (upper - actual) / actual:+.0f}% | {domain} | {horus} | "
              f"{float(p['est_horus_mib']):.0f} | {float(p['est_faketensor_mib']):.0f} | {float(p['est_gpumemnet_mib']):.0f} |")
    print()
    print("| group | estimator | cases | under-estimates | mean over-provisioning MiB (cases not under) |")
    print("|---|---|---:|---:|---:|")
    for (group, k), s in stats.items():
        mean = sum(s["over"]) / len(s["over"]) if s["over"] else float("nan")
        print(f"| {group} | {k} | {s['n']} | {s['under']} | {mean:.0f} |")


if __name__ == "__main__":
    main()
