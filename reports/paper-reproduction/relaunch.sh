#!/bin/sh
# Issue 40's figures (relaunch.md): the rows a stop for memory can change, on K jittered copies
# of both reference traces, with the binary given. Run from the repository root:
#   sh reports/paper-reproduction/relaunch.sh path/to/carma OUTDIR
# Environment: K (copies, default 8), SEED (default 1), T (the traces, default ../shared/traces),
# BEFORE=1 for a binary from before issue 40, which never enforced memory in the simulator:
# only the two rows that exist there, no journals. Writes OUTDIR/<trace>/<row>.json
# (carma.simulate-copies/1) and, for the rows with enforcement on, one journal of the
# unjittered trace per row (OUTDIR/<trace>/<row>.redb) for relaunch-table.py's stops.
set -eu
CARMA=$1
OUT=$2
K=${K:-8}
SEED=${SEED:-1}
T=${T:-../shared/traces}
R=reports/paper-reproduction
# The paper's MAGM with GPUMemNet's figures, with the tick's memory enforcement on (as a real
# carma tick runs it): magm-estimate.toml without its [enforce] section.
ENFORCED=$(mktemp)
sed '/^\[enforce\]/,$d' $R/configs/magm-estimate.toml > "$ENFORCED"
for trace in philly_heavy_60 philly_mix_90; do
  mkdir -p "$OUT/$trace"
  common="--trace $T/$trace.csv --profiles $T/workload_profiles.csv --gpus 4xA100-40GB --tick 5s --seed $SEED"
  sim() { name=$1; shift; "$CARMA" simulate $common --copies "$K" --jitter 60s --json "$@" > "$OUT/$trace/$name.json"; }
  one() { name=$1; shift; rm -f "$OUT/$trace/$name.redb"; "$CARMA" simulate $common --journal "$OUT/$trace/$name.redb" "$@" > /dev/null; }
  paper="--sharing mps --no-mps-caps --placement-pause 60s"
  sim magm-gpumemnet          --config $R/configs/magm-estimate.toml --estimator gpumemnet-paper $paper
  sim carma-gpumemnet         --config $R/configs/carma.toml --estimator gpumemnet-paper --sharing mps
  [ "${BEFORE:-0}" = 1 ] && continue
  sim magm-gpumemnet-enforced --config "$ENFORCED"                   --estimator gpumemnet-paper $paper
  one magm-gpumemnet-enforced --config "$ENFORCED"                   --estimator gpumemnet-paper $paper
  one carma-gpumemnet         --config $R/configs/carma.toml --estimator gpumemnet-paper --sharing mps
done
rm -f "$ENFORCED"
