#!/usr/bin/env python3
"""Runs a carma binary that predates --copies on the same jittered copies that `carma simulate
--copies K --jitter J --seed S` makes, and prints one JSON line per copy: copy, seed,
makespan_h, jct_mean_min, energy_mj, ooms, lost_tasks. The jitter and the copy seeds are
replicated bit for bit (SplitMix64, as src/sim/copies.rs); the exclusive baseline of the
same copies, and so the comparison, comes from the new binary's --copies output.

Usage: python3 reports/paper-reproduction/before.py CARMA_OLD TRACE PROFILES K JITTER_S SEED -- SIMULATE_ARGS...
"""
import json, shutil, subprocess, sys, os, tempfile
M = (1 << 64) - 1
class Rng:
    def __init__(self, seed): self.s = (seed ^ 0x5eedca12a0000001) & M
    def next(self):
        self.s = (self.s + 0x9e3779b97f4a7c15) & M
        z = self.s
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
        return z ^ (z >> 31)
    def unit(self): return (self.next() >> 11) / float(1 << 53)
def copy_seed(seed, k): return Rng(seed ^ ((k << 32) | k)).next() & ((1 << 48) - 1)
def jitter(rows, jitter_ms, rng):
    out = []
    for off, w in rows:
        shift = (2.0 * rng.unit() - 1.0) * jitter_ms
        v = max(0.0, off + shift)
        # Rust f64::round: half away from zero
        o = int(v + 0.5) if v >= 0 else -int(-v + 0.5)
        out.append((o, w))
    out.sort(key=lambda r: r[0])
    return out
def main():
    carma, trace, profiles, k, jit, seed = sys.argv[1:7]
    extra = sys.argv[8:]
    rows = []
    for line in open(trace).read().splitlines()[1:]:
        if not line.strip(): continue
        o, w = [c.strip() for c in line.split(',')]
        rows.append((round(float(o) * 1000), w))
    rows.sort(key=lambda r: r[0])
    tmp = tempfile.mkdtemp(prefix='carma-before-')
    for c in range(1, int(k) + 1):
        cs = copy_seed(int(seed), c)
        copy = jitter(rows, float(jit) * 1000, Rng(cs))
        path = os.path.join(tmp, 'copy-%d.csv' % c)
        with open(path, 'w') as f:
            f.write('offset_s,workload\n')
            for o, w in copy: f.write('%s,%s\n' % (repr(o / 1000) if o % 1000 else o // 1000, w))
        j = os.path.join(tmp, 'j-%d.redb' % c)
        subprocess.run([carma, 'simulate', '--trace', path, '--profiles', profiles, '--seed', str(cs), '-q', '--journal', j] + extra, check=True, capture_output=True)
        r = json.loads(subprocess.run([carma, 'report', '--journal', j, '--json'], check=True, capture_output=True, text=True).stdout)['reports'][0]
        print(json.dumps({'copy': c, 'seed': cs, 'makespan_h': r['makespan_s'] / 3600, 'jct_mean_min': r['jct']['mean_s'] / 60, 'energy_mj': r['energy_megajoules'], 'ooms': r['oom_crashes'], 'lost_tasks': r['tasks'] - r['finished']}), flush=True)
    shutil.rmtree(tmp)


if __name__ == '__main__':
    main()
