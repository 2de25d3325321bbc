#!/bin/sh
# Reproduces every table and figure in this folder. Run from the repository root:
#   sh reports/paper-reproduction/run.sh [path/to/carma]
# The reference traces are read from ../shared/traces/ (they are not copied into the repo).
set -eu
CARMA=${1:-target/release/carma}
T=../shared/traces
P=$T/workload_profiles.csv
R=reports/paper-reproduction
J=${JOURNALS:-/tmp/carma-paper-journals}
mkdir -p "$J"
for trace in philly_heavy_60 philly_mix_90; do
  sim() { name=$1; shift; "$CARMA" simulate --trace $T/$trace.csv --profiles $P --gpus 4xA100-40GB --seed 1 --tick 5s -q --journal "$J/$trace/$name.redb" "$@"; }
  mkdir -p "$J/$trace"
  # The paper's policies: its testbed collocated with MPS (no memory caps), and its scheduler
  # slept 60 s after each placement.
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
  # carma's own features, same estimates as the paper's best (GPUMemNet), same model.
  sim carma-gpumemnet   --config $R/configs/carma.toml --estimator gpumemnet-paper --sharing mps
  sim carma-oracle      --config $R/configs/carma.toml --estimator oracle --sharing mps
  set --
  for name in exclusive rr-streams rr-mps magm-recovery lug-recovery magm-horus magm-faketensor magm-gpumemnet magm-oracle carma-gpumemnet carma-oracle; do
    set -- "$@" --journal "$J/$trace/$name.redb"
  done
  "$CARMA" report "$@" --baseline exclusive > $R/$trace.txt
  "$CARMA" report "$@" --baseline exclusive --csv > $R/$trace.csv
  "$CARMA" report "$@" --baseline exclusive --json > $R/$trace.json
  "$CARMA" report "$@" --baseline exclusive --plots $R/figures/$trace > /dev/null
done
