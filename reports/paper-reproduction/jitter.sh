#!/bin/sh
# Every row of run.sh on K copies of both reference traces with arrivals jittered by +-60 s,
# each against the exclusive baseline on the same copies. Run from the repository root:
#   sh reports/paper-reproduction/jitter.sh [path/to/carma]
# Environment: K (copies, default 8), SEED (default 1), OUT (default reports/paper-reproduction/jittered).
# Writes OUT/<trace>/<row>.json (carma.simulate-copies/1), then prints the markdown table of
# jitter-table.py. The reference traces are read from ../shared/traces/.
set -eu
CARMA=${1:-target/release/carma}
K=${K:-8}
SEED=${SEED:-1}
T=../shared/traces
R=reports/paper-reproduction
OUT=${OUT:-$R/jittered}
for trace in philly_heavy_60 philly_mix_90; do
  mkdir -p "$OUT/$trace"
  sim() { name=$1; shift; "$CARMA" simulate --trace $T/$trace.csv --profiles $T/workload_profiles.csv --gpus 4xA100-40GB --tick 5s --copies "$K" --jitter 60s --seed "$SEED" --json "$@" > "$OUT/$trace/$name.json"; }
  paper="--sharing mps --no-mps-caps --placement-pause 60s"
  sim exclusive         --config $R/configs/exclusive.toml     --estimator none $paper
  sim rr-streams        --config $R/configs/rr.toml            --estimator none --sharing streams --placement-pause 60s
  sim rr-mps            --config $R/configs/rr.toml            --estimator none $paper
  sim magm-recovery     --config $R/configs/magm-recovery.toml --estimator none $paper
  sim lug-recovery      --config $R/configs/lug-recovery.toml  --estimator none $paper
  sim magm-horus        --config $R/configs/magm-estimate.toml --estimator horus $paper
  sim magm-faketensor   --config $R/configs/magm-estimate.toml --estimator faketensor $paper
  sim magm-gpumemnet    --config $R/configs/magm-estimate.toml --estimator gpumemnet-paper $paper
  sim magm-oracle       --config $R/configs/magm-estimate.toml --estimator oracle $paper
  sim carma-gpumemnet   --config $R/configs/carma.toml --estimator gpumemnet-paper --sharing mps
  sim carma-oracle      --config $R/configs/carma.toml --estimator oracle --sharing mps
done
python3 $R/jitter-table.py "$OUT"
