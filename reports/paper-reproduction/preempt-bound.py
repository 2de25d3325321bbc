#!/usr/bin/env python3
"""How far any preemption could move the makespan on jittered copies, by the throughput bound.

losses.py splits a run's makespan into the work divided by the throughput bound of four GPUs
and what the run delivered below that bound, by cause. Preemption acts only while a task
waits: it can remove the losses of that time (idle, startup, alone, under), never create
work, and it adds the work it loses and the restarts. So the run's makespan minus its
while-waiting losses bounds what a free and perfect preemption could reach with the same
tail (the stretch after the last task started, when nothing waits).

Usage, per trace and seed (the `simulate` of preempt.sh plus --journal DIR):
  carma simulate ... --copies K --seed S --json --journal DIR > FILE.json
  python3 reports/paper-reproduction/preempt-bound.py CARMA PROFILES_CSV FILE.json:DIR ...
Prints, over all copies given: the run's mean makespan against exclusive, the bound with no
while-waiting loss, the bound with no loss at all (tail included), and the mean tail and
while-waiting losses in hours of all four GPUs.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import losses  # noqa: E402

WAITING = ("idle", "startup", "alone", "under")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    carma, profiles = sys.argv[1], sys.argv[2]
    sm = losses.standalone_sm(profiles)
    rows = []
    for pair in sys.argv[3:]:
        path, directory = pair.split(":", 1)
        evaluation = json.load(open(path))
        for run in evaluation["runs"]:
            journal = os.path.join(directory, f"run-{run['copy']}.redb")
            tasks = losses.attempts(losses.events(carma, journal))
            gpus = sorted({g for T in tasks.values() for a in T["att"] for g in a[0]})
            makespan, lost = losses.losses(tasks, sm, gpus, 1.10, 0.05, 40.0)
            waiting = sum(lost.get(c, 0.0) for c in WAITING)
            tail = lost.get("tail", 0.0)
            exclusive = run["baseline"]["makespan_h"]
            rows.append((makespan / exclusive - 1, (makespan - waiting) / exclusive - 1,
                         (makespan - waiting - tail) / exclusive - 1, tail, waiting))
    mean = [statistics.mean(r[i] for r in rows) for i in range(5)]
    print(f"copies {len(rows)}: makespan vs exclusive {100 * mean[0]:+.1f} %, "
          f"no while-waiting loss {100 * mean[1]:+.1f} %, no loss {100 * mean[2]:+.1f} %; "
          f"tail {mean[3]:.2f} h, while-waiting losses {mean[4]:.2f} h")


if __name__ == "__main__":
    main()
