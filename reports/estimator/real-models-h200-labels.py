#!/usr/bin/env python3
"""carma's estimate for the models measured on the H200 (reports/gpu/h200-2026-11-26/),
scored against both of its labels: the peak alone and the peak under memory pressure
(issue 24: "report over-provisioning and under-estimates against both kinds of label").

The H200's CUDA context took 527 MiB where the training file's A100 runs took about 1,443
(carma's context floor), so each label is also scored with the context difference added
back ("A100-context"): the figure the same run would have shown on the card carma was
trained on.

    python3 reports/estimator/real-models-h200-labels.py target/release/carma
"""
import csv
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUN = HERE.parent / "gpu" / "h200-2026-11-26"
CONTEXT_FLOOR_MIB = 1443


def estimate(carma, summary, batch):
    out = subprocess.run(
        [carma, "estimate", "--summary", str(summary), "--batch-size", str(batch), "--estimator", "carma",
         "--json", "--home", "/tmp/carma-h200-labels"],
        check=True, capture_output=True, text=True).stdout
    e = json.loads(out)["estimates"][0]["estimate"]
    return e["upper_mib"], e["bound"]


def main(carma):
    rows = list(csv.DictReader(open(RUN / "labels.csv")))
    scores = {}
    print("| model @ batch | bound | upper MiB | alone | under pressure | alone, A100 context | under pressure, A100 context |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        batch = int(r["batch_size"])
        upper, bound = estimate(carma, RUN / "summaries" / f"{r['model']}_bs{batch}.json", batch)
        extra = CONTEXT_FLOOR_MIB - int(r["context_mib"])
        labels = {
            "alone": int(r["max_gpu_memory_mib"]),
            "under pressure": int(r["peak_under_pressure_mib"]),
            "alone, A100 context": int(r["max_gpu_memory_mib"]) + extra,
            "under pressure, A100 context": int(r["peak_under_pressure_mib"]) + extra,
        }
        cells = []
        for name, label in labels.items():
            over = (upper - label) / label * 100.0
            scores.setdefault(name, []).append((upper < label, max(0.0, over)))
            cells.append(f"{label:,} ({over:+.0f}%)")
        print(f"| {r['model']} @ {batch} | {bound} | {upper:,} | " + " | ".join(cells) + " |")
    for name, s in scores.items():
        unders = sum(u for u, _ in s)
        mean = sum(o for _, o in s) / len(s)
        print(f"{name}: {unders} of {len(s)} under-estimated, mean over-provisioning {mean:.1f}%")


if __name__ == "__main__":
    main(sys.argv[1])
