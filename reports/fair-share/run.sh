#!/bin/sh
# Fair share against FIFO for a light user who shares the queue with a heavy one (issue 12).
# Run as root (the simulator gives each trace user's spool files to a uid of their own) from
# the repository root, with the reference profiles in ../shared/traces/:
#   sh reports/fair-share/run.sh [path/to/carma]
# Writes reports/fair-share/results.csv: one row per seed and configuration.
set -eu
CARMA=${1:-target/release/carma}
P=../shared/traces/workload_profiles.csv
R=reports/fair-share
J=${JOURNALS:-/tmp/carma-fair-share}
TASKS=${TASKS:-200}
GAP=${GAP:-60s}
mkdir -p "$J"
echo "seed,config,light_tasks,light_wait_mean_min,light_wait_p95_min,heavy_tasks,heavy_wait_mean_min,all_wait_mean_min,makespan_h" > $R/results.csv
for seed in 1 2 3 4 5; do
  "$CARMA" trace gen --profiles $P --tasks $TASKS --mean-gap $GAP --users heavy:0.9,light:0.1 --seed $seed --out "$J/trace-$seed.csv" > /dev/null
  for config in fifo-strict fifo fair-share; do
    journal="$J/$config-$seed.redb"
    "$CARMA" simulate --trace "$J/trace-$seed.csv" --profiles $P --gpus 4xA100-40GB --seed $seed --tick 5s -q \
      --config $R/$config.toml --journal "$journal" > /dev/null
    # heavy is uid 10001, light 10002 (sorted names); the per-user figures come from report --json.
    "$CARMA" report --journal "$journal" --json | python3 -c '
import json, sys
r = json.load(sys.stdin)["reports"][0]
users = {u["uid"]: u for u in r["users"]}
m = lambda s: "" if s is None else "%.2f" % (s / 60)
heavy, light = users[10001], users[10002]
print(",".join([sys.argv[1], sys.argv[2], str(light["tasks"]), m(light["waiting"]["mean_s"]), m(light["waiting"]["p95_s"]),
      str(heavy["tasks"]), m(heavy["waiting"]["mean_s"]), m(r["waiting"]["mean_s"]), "%.3f" % (r["makespan_s"] / 3600)]))
' "$seed" "$config" >> $R/results.csv
  done
done
cat $R/results.csv
