#!/bin/sh
# carma's recommended configuration against the configuration before issue 15, on the same K
# jittered copies (+-60 s, seed 1) of both reference traces: the "before" at the default model,
# and both under a stricter MPS interference calibration (eta = 1.05, issue 15's robustness
# check). The "after" at the default model is jitter.sh's carma-gpumemnet row. From the
# repository root:
#   sh reports/paper-reproduction/before-after.sh path/to/carma path/to/carma-before
# where carma-before is `cargo build --release` of commit 6182724 (it has no --copies:
# before.py replays the same copies bit for bit). Environment: K (default 8), OUT (default
# reports/paper-reproduction/before-after). Writes OUT/<trace>-before.jsonl (default model),
# OUT/<trace>-eta105-after.json (carma.simulate-copies/1, with the exclusive baseline) and
# OUT/<trace>-eta105-before.jsonl (one line per copy).
set -eu
CARMA=${1:?path to carma}; BEFORE=${2:?path to the carma binary of commit 6182724}
K=${K:-8}
T=../shared/traces
R=reports/paper-reproduction
OUT=${OUT:-$R/before-after}
MODEL=$R/sim-model-eta105.toml
mkdir -p "$OUT"
for trace in philly_heavy_60 philly_mix_90; do
  python3 $R/before.py "$BEFORE" $T/$trace.csv $T/workload_profiles.csv "$K" 60 1 -- \
    --gpus 4xA100-40GB --tick 5s --config $R/configs/carma-before.toml \
    --estimator gpumemnet-paper --sharing mps > "$OUT/$trace-before.jsonl"
  "$CARMA" simulate --trace $T/$trace.csv --profiles $T/workload_profiles.csv --gpus 4xA100-40GB --tick 5s \
    --model $MODEL --config $R/configs/carma.toml --estimator gpumemnet-paper --sharing mps \
    --copies "$K" --jitter 60s --seed 1 --json > "$OUT/$trace-eta105-after.json"
  python3 $R/before.py "$BEFORE" $T/$trace.csv $T/workload_profiles.csv "$K" 60 1 -- \
    --gpus 4xA100-40GB --tick 5s --model $MODEL --config $R/configs/carma-before.toml \
    --estimator gpumemnet-paper --sharing mps > "$OUT/$trace-eta105-before.jsonl"
done
