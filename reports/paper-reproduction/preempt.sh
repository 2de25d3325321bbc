#!/bin/sh
# carma-preempt.toml (preemption on) and carma.toml (off) on K jittered copies of both
# reference traces, each against the exclusive baseline on the same copies, as section 5 of
# the README runs carma.toml. Run from the repository root:
#   sh reports/paper-reproduction/preempt.sh [path/to/carma]
# Environment: K (copies, default 8), SEEDS (default "1 2 3 4"), CONFIGS (default
# "carma-preempt carma"), OUT (default reports/paper-reproduction/preempt), MODEL (a model
# file passed as --model, default none: traces/sim-model.toml's defaults), CONFIG_DIR (where
# the configurations are, default reports/paper-reproduction/configs), TRACES (default
# ../shared/traces).
# Writes OUT/<trace>-<config>-k<K>-seed<S>.json (carma.simulate-copies/1), then prints the
# table of preempt-table.py. The reference traces are read from ../shared/traces/.
set -eu
CARMA=${1:-target/release/carma}
K=${K:-8}
SEEDS=${SEEDS:-1 2 3 4}
CONFIGS=${CONFIGS:-carma-preempt carma}
T=${TRACES:-../shared/traces}
R=reports/paper-reproduction
OUT=${OUT:-$R/preempt}
CONFIG_DIR=${CONFIG_DIR:-$R/configs}
mkdir -p "$OUT"
for seed in $SEEDS; do for t in philly_heavy_60 philly_mix_90; do for c in $CONFIGS; do
  "$CARMA" simulate --trace $T/$t.csv --profiles $T/workload_profiles.csv --gpus 4xA100-40GB \
    --tick 5s --config "$CONFIG_DIR/$c.toml" ${MODEL:+--model "$MODEL"} --estimator gpumemnet-paper --sharing mps \
    --copies "$K" --jitter 60s --seed "$seed" --json > "$OUT/$t-$c-k$K-seed$seed.json"
done; done; done
python3 $R/preempt-table.py "$OUT"
