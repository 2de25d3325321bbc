#!/bin/sh
# A sweep of carma's scheduler settings on one reference trace: policy x SM cap x memory margin,
# with backfill, memory in flight and looser recovery, MPS with caps. Prints one line per
# configuration: policy sm-cap margin makespan_h ooms lost_attempts failed mean_jct_min energy_mj.
# Usage (from the repository root): sh reports/paper-reproduction/sweep.sh philly_heavy_60 gpumemnet-paper | sort -k4 -n
T=${TRACES:-../shared/traces}; tr=$1; est=$2; CARMA=${CARMA:-target/release/carma}; W=${WORK:-/tmp/carma-sweep}; mkdir -p "$W"
for pol in magm lug mug first-fit; do for cap in 0.8 0.9 1.0; do for margin in 1024 2048 3072; do
cfg=$W/c-$pol-$cap-$margin.toml
cat > $cfg <<EOT
[sched]
policy = "$pol"
sm-cap = $cap
margin-with-figure-mib = $margin
exclusive-first = true
backfill = true
in-flight-grace-ms = 120000

[sched.recovery]
mode = "looser"
EOT
$CARMA simulate --trace $T/$tr.csv --profiles $T/workload_profiles.csv --gpus 4xA100-40GB --seed 1 --tick 5s -q --journal $W/j.redb --config $cfg --estimator $est --sharing mps >/dev/null 2>&1 || { echo "$pol $cap $margin FAILED"; continue; }
$CARMA report --journal $W/j.redb --json | python3 -c "
import json,sys; r=json.load(sys.stdin)['reports'][0]; print('$pol $cap $margin', round(r['makespan_s']/3600,3), r['oom_crashes'], r['lost_attempts'], r['failed'], round(r['jct']['mean_s']/60,1), round(r['energy_megajoules'],2))"
done; done; done
