#!/usr/bin/env bash
# The simulator's reports with the supervisor's readings off (as before issue 40) and on (the
# default), on the demo trace and the reference traces, with GPUMemNet's and the oracle's
# figures:
#
#   [SHARED_TRACES=DIR] bash reports/supervisor-sampling/sim-before-after.sh CARMA_BINARY OUT_DIR
#
# "Off" is `[enforce] supervisor-sample-ms = 0`, which gives the plans no `gpu_watch`, so the
# simulated exits carry no readings: exactly the code before them. Writes OUT_DIR/<trace>-<estimator>-{off,on}.json
# (`carma report --json`) and prints the lines that differ.
set -euo pipefail
bin=$(realpath "$1"); out=$(realpath -m "$2")
here=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SHARED_TRACES:-"$here/../shared/traces"}
mkdir -p "$out"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf '[enforce]\nsupervisor-sample-ms = 0\n' > "$tmp/off.toml"
printf '[enforce]\nsupervisor-sample-ms = 500\n' > "$tmp/on.toml"
run() { # name trace profiles
    local name=$1 trace=$2 profiles=$3
    if [ ! -f "$trace" ]; then echo "skipped $name: $trace absent"; return; fi
    for estimator in gpumemnet-paper oracle; do
        for side in off on; do
            local tag="$name-$estimator-$side"
            "$bin" simulate --home "$tmp/home-$tag" --trace "$trace" --profiles "$profiles" \
                --estimator "$estimator" --config "$tmp/$side.toml" --seed 7 --journal "$tmp/$tag.redb" >/dev/null
            (cd "$tmp" && "$bin" report --home "home-$tag" --journal "$tag.redb" --json) \
                | sed "s/$tag/RUN/g" >"$out/$tag.json"
        done
        if cmp -s "$out/$name-$estimator-off.json" "$out/$name-$estimator-on.json"; then
            echo "$name $estimator: the same report off and on"
        else
            echo "$name $estimator: reports differ:"
            diff <(tr ',' '\n' <"$out/$name-$estimator-off.json") <(tr ',' '\n' <"$out/$name-$estimator-on.json") || true
        fi
    done
}
run demo-40 "$here/traces/demo-40.csv" "$here/traces/demo-profiles.csv"
run philly_heavy_60 "$shared/philly_heavy_60.csv" "$shared/workload_profiles.csv"
run philly_mix_90 "$shared/philly_mix_90.csv" "$shared/workload_profiles.csv"
