#!/bin/sh
# The queue order (issue 43): each configuration on K jittered copies of both reference
# traces, under the simulator's three regimes of declared time limits (default 1.2-3x the
# true run time, none, loose 1.5-10x; and exact, every limit the true run time, for an oracle),
# each against the exclusive baseline on the same copies.
# Run from the repository root:
#   sh reports/paper-reproduction/order.sh [path/to/carma]
# Environment: K (copies, default 8), SEEDS (default "11 12"), CONFIGS (default
# "carma carma-preempt"), REGIMES (default "default none loose"), OUT (default
# reports/paper-reproduction/order), CONFIG_DIR (default reports/paper-reproduction/configs),
# TRACES (default ../shared/traces).
# Writes OUT/<config>/<trace>-<regime>-seed<S>.json (carma.simulate-copies/1), then prints
# the table of order-table.py.
set -eu
CARMA=${1:-target/release/carma}
K=${K:-8}
SEEDS=${SEEDS:-11 12}
CONFIGS=${CONFIGS:-carma carma-preempt}
REGIMES=${REGIMES:-default none loose}
T=${TRACES:-../shared/traces}
R=reports/paper-reproduction
OUT=${OUT:-$R/order}
CONFIG_DIR=${CONFIG_DIR:-$R/configs}
for c in $CONFIGS; do
  mkdir -p "$OUT/$c"
  for regime in $REGIMES; do for seed in $SEEDS; do for t in philly_heavy_60 philly_mix_90; do
    # As factors, so that a binary from before the regimes had names runs the same command.
    case $regime in default) limits=1.2:3 ;; loose) limits=1.5:10 ;; exact) limits=1:1 ;; *) limits=$regime ;; esac
    "$CARMA" simulate --trace $T/$t.csv --profiles $T/workload_profiles.csv --gpus 4xA100-40GB \
      --tick 5s --config "$CONFIG_DIR/$c.toml" --estimator gpumemnet-paper --sharing mps \
      --time-limits "$limits" --copies "$K" --jitter 60s --seed "$seed" --json \
      > "$OUT/$c/$t-$regime-seed$seed.json"
  done; done; done
done
python3 $R/order-table.py "$OUT"
