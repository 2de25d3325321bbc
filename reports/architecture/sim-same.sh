#!/usr/bin/env bash
# The simulator's reports on the reference traces and the demo trace, for a before/after diff.
#
#   bash reports/architecture/sim-same.sh CARMA_BINARY OUT_DIR
#   diff -r before/ after/        # must print nothing
#
# CONFIG=FILE simulates with that carma config.toml (e.g. the paper-reproduction's) instead of
# the defaults; TRACES=DIR reads the Philly traces from DIR instead of ../shared/traces.
#
# Each trace is simulated with a fixed seed; `carma report --json` of the resulting journal is
# written to OUT_DIR/<trace>.json. A structural change must leave every byte of these equal.
# The Philly traces live in ../shared/traces (not copied into the project); they are skipped,
# with a note, where that folder is absent.
set -euo pipefail
bin=$(realpath "$1"); out=$(realpath -m "$2")
here=$(cd "$(dirname "$0")/../.." && pwd)
shared=${TRACES:-"$here/../shared/traces"}
mkdir -p "$out"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() { # name trace profiles
    local name=$1 trace=$2 profiles=$3
    if [ ! -f "$trace" ]; then echo "skipped $name: $trace absent"; return; fi
    "$bin" simulate --home "$tmp/home-$name" --trace "$trace" --profiles "$profiles" \
        --seed 7 ${CONFIG:+--config "$(realpath "$CONFIG")"} --journal "$tmp/$name.redb" >/dev/null
    # Relative journal paths, so the reports name the same file in every run.
    (cd "$tmp" && "$bin" report --home "home-$name" --journal "$name.redb" --json) >"$out/$name.json"
    (cd "$tmp" && "$bin" report --home "home-$name" --journal "$name.redb" --tasks --json) \
        >"$out/$name-tasks.json"
    echo "wrote $out/$name.json and $name-tasks.json"
}
run demo-40 "$here/traces/demo-40.csv" "$here/traces/demo-profiles.csv"
run philly_heavy_60 "$shared/philly_heavy_60.csv" "$shared/workload_profiles.csv"
run philly_mix_90 "$shared/philly_mix_90.csv" "$shared/workload_profiles.csv"
