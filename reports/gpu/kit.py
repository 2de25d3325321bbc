"""The GPU kit's driver (run through run.sh): carma on one real GPU, or in a dry run on a fake
one, in five sections, written to OUT as report.md, report.json, nvml.csv, labels.csv and
the raw outputs.

1. nvml: carma's readings (`carma tick` then `carma gpus --json`) beside
   `nvidia-smi --query-gpu`, every few seconds while a training job runs;
2. queue: a temporary queue driven by `carma tick` every 2 s, with collocated training jobs,
   one of which grabs more than it declared: stopped over its share (or out of memory beside
   the others), relaunched with what it used, and Finished; `carma report`;
3. recovery (recovery.py): a job under-declared beside a neighbour left untouched, and a job
   out of memory between two ticks; each must end Finished after a relaunch;
4. mps: a job under an MPS pinned memory limit that tries to exceed it, and one within it;
5. labels: peak alone and the smallest cap under which training still runs, per model and
   batch size (the CSV carma-train reads, plus the peak under pressure), and carma's estimate
   re-evaluated against both.

Only hw.py reads hardware; everything else is the same in a dry run.
"""

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hw  # noqa: E402
import recovery  # noqa: E402

SECTIONS = ("nvml", "queue", "recovery", "mps", "labels")

# Real run: a sample of the dev split's models and batch sizes (names only; the labels come
# from this run), spikes included: resnetaa50d and resnet26t at batch 8, vgg13 at 32, MobileViT-v2,
# coatnet_0 at 8 (over 4x in cross-validation). Dry run: the tiny CPU model.
# The spikes come first: with a short lease, the labels most worth having are measured first.
LABEL_SAMPLE = [
    ("resnetaa50d", 8), ("resnet26t", 8), ("vgg13", 32), ("mobilevitv2_050", 16), ("coatnet_0_224", 8),
    ("resnet18", 64), ("resnet50d", 32), ("efficientnet_b1", 64), ("mobilenetv3_large_100", 64),
    ("regnety_016", 32), ("deit_tiny_distilled_patch16_224", 64), ("swinv2_cr_tiny_224", 32),
]
DRY_LABEL_SAMPLE = [("tiny", 8)]
LABEL_COLUMNS = [
    "model", "batch_size", "max_gpu_memory_mib", "faketensor_after_forward_mib",
    "faketensor_after_backward_mib", "faketensor_last_numeric_mib", "peak_under_pressure_mib",
    "min_cap_mib", "context_mib", "probes",
]


class Kit:
    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        self.dry = args.dry_run
        self.carma = os.path.abspath(args.carma)
        self.hw = hw.Hardware(self.dry, self.out)
        self.python = sys.executable
        self.report = {"dry_run": self.dry, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "sections": {}}
        self.t0 = time.time()
        # A lease is short and ends hard: with --deadline-minutes every section and every
        # subprocess stops in time for the report to be written and copied back.
        self.deadline = self.t0 + args.deadline_minutes * 60 if args.deadline_minutes else None
        # Whether torch is there, without importing it (seconds on a busy machine).
        try:
            import importlib.metadata
            self.torch = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            self.torch = None

    # --- helpers -------------------------------------------------------------------------
    def left(self, reserve=0.0):
        """Seconds left before the deadline less `reserve` (a day without one)."""
        return 86400.0 if self.deadline is None else self.deadline - reserve - time.time()

    def run(self, argv, env=None, timeout=120, check=True):
        full_env = dict(os.environ, **(env or {}))
        timeout = max(1.0, min(timeout, self.left()))
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:4])} exited {r.returncode}: {r.stderr.strip()[-300:]}")
        return r

    def carma_cmd(self, home, *argv, check=True, timeout=120):
        return self.run([self.carma, "--home", home, *argv], env=self.hw.job_env(), check=check, timeout=timeout)

    def new_queue(self, name, extra=""):
        home = os.path.join(self.out, "work", name)
        shutil.rmtree(home, ignore_errors=True)
        self.carma_cmd(home, "init")
        with open(os.path.join(home, "config.toml"), "w") as f:
            f.write(f'[tick]\ngpus = "{self.hw.carma_gpus_setting()}"\n{extra}')
        return home

    def tick(self, home):
        self.hw.before_tick()
        return self.carma_cmd(home, "tick", timeout=60)

    def job_argv(self, *flags):
        return [self.python, os.path.join(HERE, "job.py"), *flags]

    def section(self, name, fn):
        started = time.time()
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - a failed section is reported, the others still run
            result = {"status": f"failed: {e}"}
        result["seconds"] = round(time.time() - started, 1)
        self.report["sections"][name] = result
        print(f"[{time.time() - self.t0:6.0f} s] {name}: {result['status']}", flush=True)
        self.write()  # after each section: a lease that ends mid-run still leaves a report

    # --- 1. NVML and GPM against nvidia-smi -------------------------------------------------
    def nvml(self):
        home = self.new_queue("nvml")
        seconds = 6 if self.dry else 60
        load = subprocess.Popen(
            self.job_argv("--steps", str(int(seconds / 0.2) + 50), "--ballast-mib", "4096", "--step-seconds", "0.2"),
            env=dict(os.environ, **self.hw.job_env()), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        rows = []
        try:
            time.sleep(2 if self.dry else 10)
            end = time.time() + seconds
            while time.time() < end:
                self.tick(home)
                gpus = json.loads(self.carma_cmd(home, "gpus", "--json").stdout)
                smi = self.hw.smi()
                g = gpus["gpus"][0]
                rows.append({
                    "t_s": round(time.time() - self.t0, 1),
                    "carma_total_mib": g["memory_total_mib"], "smi_total_mib": smi["memory.total"],
                    "carma_used_mib": g["memory_used_mib"], "smi_used_mib": smi["memory.used"],
                    "carma_reserved_mib": g["memory_reserved_mib"], "smi_reserved_mib": smi["memory.reserved"],
                    "carma_free_mib": g["memory_free_mib"], "smi_free_mib": smi["memory.free"],
                    "carma_sm_active": g["sm_active"], "carma_sm_source": g["sm_source"],
                    "carma_util_gpu": g["util_gpu"], "smi_util_gpu_pct": smi["utilization.gpu"],
                    "carma_power_w": g["power_w"], "smi_power_w": smi["power.draw"],
                    "carma_energy_mj": g["energy_mj"], "smi_energy_mj": smi.get("total_energy_consumption"),
                    "carma_mig": g["mig_enabled"], "smi_mig": smi["mig.mode.current"],
                    "carma_unavailable": ";".join(g["unavailable_metrics"]),
                })
                time.sleep(1 if self.dry else 4)
        finally:
            load.kill()
            load.wait()
        with open(os.path.join(self.out, "nvml.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)

        def num(v):
            try:
                return float(v)
            except (TypeError, ValueError):
                return None

        def worst(a, b):
            d = [abs(num(r[a]) - num(r[b])) for r in rows if num(r[a]) is not None and num(r[b]) is not None]
            return max(d) if d else None
        diffs = {k: worst(f"carma_{k}_mib", f"smi_{k}_mib") for k in ("total", "used", "reserved", "free")}
        diffs["power_w"] = worst("carma_power_w", "smi_power_w")
        gpm = sorted({r["carma_sm_source"] for r in rows})
        status = "ok" if rows and diffs["total"] == 0 else "mismatch"
        return {"status": status, "samples": len(rows), "max_abs_difference": diffs, "sm_sources": gpm,
                "rows": rows}

    # --- 2. the real tick on real jobs -----------------------------------------------------
    def queue(self):
        home = self.new_queue("queue", "\n[sched.recovery]\nmode = \"exclusive\"\n")
        steps, step_s, grab_after = (25, 0.2, 3) if self.dry else (150, 0.2, 15)
        # Three jobs hold 15% of the card each; the fourth, declared like them, tries to hold
        # 60% once they have theirs: 105% beside them, 61% alone.
        total = float(self.hw.smi()["memory.total"])
        ballast = round(0.15 * total)
        declared = f"{ballast + 2048}MiB"
        jobs = [(f"train-{i}", self.job_argv("--steps", str(steps), "--ballast-mib", str(ballast),
                                                "--step-seconds", str(step_s))) for i in range(3)]
        jobs.append(("grabs-too-much", self.job_argv("--steps", str(steps), "--ballast-mib", "1024",
                                                       "--grab-fraction", "0.6", "--grab-after", str(grab_after),
                                                       "--step-seconds", str(step_s))))
        ids = {}
        for name, argv in jobs:
            r = self.carma_cmd(home, "submit", "--parsable", "--name", name, "--gpus", "1", "--mem", declared,
                               "--max-retries", "2", "--", *argv)
            ids[r.stdout.strip()] = name
        # What is left after it goes to the recovery cases (about 80 s on a GPU), MPS and the labels.
        deadline = time.time() + min(240 if self.dry else 360, max(30.0, self.left(reserve=330)))
        max_running, snapshots, relaunched_alone = 0, [], None
        while time.time() < deadline:
            self.tick(home)
            q = json.loads(self.carma_cmd(home, "queue", "--all", "--json").stdout)
            running = [t for t in q["tasks"] if t["state"].lower() == "running"]
            max_running = max(max_running, len(running))
            snapshots.append({"t_s": round(time.time() - self.t0, 1),
                              "running": sorted(ids.get(t["id"], t["id"]) for t in running)})
            oom_task = [t for t in q["tasks"] if ids.get(t["id"]) == "grabs-too-much"]
            if oom_task and oom_task[0]["attempts"] >= 2 and oom_task[0]["state"].lower() == "running":
                others = [t for t in running if t["id"] != oom_task[0]["id"]]
                relaunched_alone = relaunched_alone if relaunched_alone is not None else not others
            if all(t["state"].lower() in ("finished", "failed", "cancelled") for t in q["tasks"]):
                break
            time.sleep(2)
        events = [json.loads(line) for line in self.carma_cmd(home, "events", "--json").stdout.splitlines() if line]
        ooms = [e for e in events if "OomDetected" in json.dumps(e)]
        report_text = self.carma_cmd(home, "report").stdout
        report_json = json.loads(self.carma_cmd(home, "report", "--json").stdout)
        final = json.loads(self.carma_cmd(home, "queue", "--all", "--json").stdout)["tasks"]
        with open(os.path.join(self.out, "carma-report.txt"), "w") as f:
            f.write(report_text)
        with open(os.path.join(self.out, "carma-events.jsonl"), "w") as f:
            f.writelines(json.dumps(e) + "\n" for e in events)
        tasks = [{"name": ids.get(t["id"], t["id"]), "id": t["id"], "state": t["state"], "attempts": t["attempts"]}
                 for t in final]
        oom_stderr = None
        for t in final:
            if ids.get(t["id"]) == "grabs-too-much":
                r = self.carma_cmd(home, "logs", t["id"], "--stderr", "--attempt", "1", check=False)
                oom_stderr = [line for line in r.stdout.splitlines() if "out of memory" in line.lower()][:1]
        # One right ending since a stop for memory is a relaunch (issue 40): the grabbing job,
        # stopped over its declared share where the GPU lists its own memory (NVML does, and so
        # does the dry run's fake GPU) or out of memory beside the others, is queued again with
        # what it used and Finished; its neighbours each ran once. A stop for memory without a
        # relaunch (what the H100 run of 2026-11-27 ended with) is a wrong ending.
        grab_id = next((t["id"] for t in tasks if t["name"] == "grabs-too-much"), None)
        grab = next((t for t in final if t["id"] == grab_id), None)
        told = recovery.story(events, grab_id)
        ending = recovery.classify(grab, told) if grab else "not submitted"
        neighbours_once = all(recovery.untouched(t, recovery.story(events, t["id"])) for t in final
                              if t["id"] != grab_id)
        ok = max_running >= 3 and ending == "finished after a relaunch" and neighbours_once
        return {"status": "ok" if ok else "unexpected", "tasks": tasks, "max_running_at_once": max_running,
                "ending": ending, "neighbours_ran_once": neighbours_once,
                "memory_exceeded": told["memory_exceeded"],
                "requeued": [r.get("reason") for r in told["requeued"]],
                "oom_events": len(ooms), "oom_stderr_line": oom_stderr, "relaunched_alone": relaunched_alone,
                "ticks": len(snapshots), "running_over_time": snapshots, "carma_report": report_text,
                "carma_report_json": report_json}

    # --- 3. recovery: Finished after a relaunch ------------------------------------------------
    def recovery(self):
        return recovery.Cases(self).run()

    # --- 4. MPS caps --------------------------------------------------------------------------
    def mps(self):
        control, why = self.hw.mps_control()
        env = dict(self.hw.job_env())
        daemon = None
        if control:
            pipe = os.path.join(self.out, "work", "mps")
            os.makedirs(pipe, exist_ok=True)
            env.update(CUDA_MPS_PIPE_DIRECTORY=pipe, CUDA_MPS_LOG_DIRECTORY=pipe)
            r = self.run([control, "-d"], env=env, check=False)
            if r.returncode != 0:
                return {"status": f"skipped: MPS daemon did not start: {r.stderr.strip()[:200]}"}
            daemon = control
        try:
            cap = 2048
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={cap}M"
            # A client that cannot reach the daemon waits for it: 60 s is ample for one allocation.
            over = self.run(self.job_argv("--no-train", "--grab-mib", str(cap * 2)), env=env, check=False,
                            timeout=60)
            within = self.run(self.job_argv("--no-train", "--grab-mib", str(cap // 4)), env=env, check=False,
                              timeout=60)
        finally:
            if daemon:
                subprocess.run([daemon], input="quit\n", text=True, env=dict(os.environ, **env), timeout=30)
        over_oom = over.returncode != 0 and "out of memory" in over.stderr.lower()
        ok = over_oom and within.returncode == 0
        return {"status": "ok" if ok else "unexpected", "mps": "real daemon" if daemon else f"not started ({why})",
                "cap_mib": cap, "over_cap_exit": over.returncode,
                "over_cap_stderr": over.stderr.strip().splitlines()[-1:] if over.stderr else [],
                "within_cap_exit": within.returncode}

    # --- 5. labels under memory pressure -------------------------------------------------
    def measure(self, model, batch, cap=None):
        argv = [self.python, os.path.join(HERE, "label.py"), "--model", model, "--batch", str(batch)]
        if cap is not None:
            argv += ["--cap-mib", f"{cap:.0f}"]
        try:
            r = self.run(argv, env=self.hw.job_env(), check=False, timeout=300)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"label.py {model} bs{batch}: no answer in time") from None
        lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise RuntimeError(f"label.py {model} bs{batch}: {r.stderr.strip()[-200:]}")
        return json.loads(lines[-1])

    def labels(self):
        if self.torch is None:
            return {"status": "skipped: torch is not installed (the dry run's label part needs CPU torch)"}
        sample = DRY_LABEL_SAMPLE if self.dry else LABEL_SAMPLE
        # What is left after the labels goes to the summaries and carma's estimates (~10 s a model).
        budget_end = time.time() + min(90 if self.dry else self.args.label_minutes * 60,
                                       self.left(reserve=75))
        rows, skipped = [], []
        for model, batch in sample:
            if time.time() > budget_end:
                skipped.append(f"{model} bs{batch}: time budget spent")
                continue
            try:
                alone = self.measure(model, batch)
            except RuntimeError as e:
                skipped.append(str(e))
                continue
            if not alone["ok"]:
                skipped.append(f"{model} bs{batch}: out of memory alone")
                continue
            lo, hi, best, probes = 0.0, alone["peak_reserved_mib"], alone, 0
            resolution = max(1.0, hi / 32)
            while hi - lo > resolution and probes < 8 and time.time() < budget_end:
                mid = (lo + hi) / 2
                m = self.measure(model, batch, cap=mid)
                probes += 1
                if m["ok"]:
                    hi, best = mid, m
                else:
                    lo = mid
            rows.append({
                "model": model, "batch_size": batch, "max_gpu_memory_mib": round(alone["peak_used_mib"]),
                "faketensor_after_forward_mib": "", "faketensor_after_backward_mib": "",
                "faketensor_last_numeric_mib": "",
                "peak_under_pressure_mib": round(best["context_mib"] + best["peak_reserved_mib"]),
                "min_cap_mib": round(hi), "context_mib": round(alone["context_mib"]), "probes": probes,
            })
        with open(os.path.join(self.out, "labels.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=LABEL_COLUMNS)
            w.writeheader()
            w.writerows(rows)
        evaluation = self.evaluate(rows)
        status = "ok" if rows else "no labels"
        return {"status": status, "rows": rows, "skipped": skipped, "evaluation": evaluation}

    def evaluate(self, rows):
        """carma's estimate for each labelled run against both labels. Retraining needs the
        Rust toolchain: the CSV and summaries go back to the build machine for that."""
        dumper = os.path.join(HERE, "..", "..", "estimator-training", "dump_model.py")
        if not rows:
            return {"status": "skipped: no labels"}
        if not os.path.exists(dumper):
            return {"status": "skipped: estimator-training/dump_model.py is not beside reports/gpu"}
        summaries = os.path.join(self.out, "summaries")
        os.makedirs(summaries, exist_ok=True)
        env = dict(self.hw.job_env(), PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
        result = []
        for row in rows:
            model, batch = row["model"], row["batch_size"]
            if self.left(reserve=5) < 15:
                result.append({"model": model, "batch_size": batch, "error": "deadline reached"})
                continue
            what = ["--module", "tiny:tiny", "--input-shape", "3,32,32"] if model == "tiny" else ["--timm", model]
            r = self.run([self.python, dumper, *what, "--batch-sizes", str(batch), "--out-dir", summaries],
                         env=env, check=False, timeout=300)
            path = os.path.join(summaries, f"{model}_bs{batch}.json")
            if not os.path.exists(path):
                written = [p for p in os.listdir(summaries) if p.endswith(f"_bs{batch}.json") and model in p]
                if not written:
                    result.append({"model": model, "batch_size": batch, "error": r.stderr.strip()[-200:]})
                    continue
                os.replace(os.path.join(summaries, written[0]), path)
            e = json.loads(self.run([self.carma, "estimate", "--summary", path, "--json"]).stdout)
            est = next(a["estimate"] for a in e["estimates"] if a["estimator"] == "carma")
            result.append({
                "model": model, "batch_size": batch, "carma_mib": est["mib"], "carma_upper_mib": est["upper_mib"],
                "bound": est.get("bound"), "alone_mib": row["max_gpu_memory_mib"],
                "under_pressure_mib": row["peak_under_pressure_mib"],
                "under_alone": est["upper_mib"] < row["max_gpu_memory_mib"],
                "under_pressure": est["upper_mib"] < row["peak_under_pressure_mib"],
                "over_alone_pct": round(100 * (est["upper_mib"] - row["max_gpu_memory_mib"]) / row["max_gpu_memory_mib"], 1),
                "over_pressure_pct": round(
                    100 * (est["upper_mib"] - row["peak_under_pressure_mib"]) / row["peak_under_pressure_mib"], 1),
            })
        scored = [r for r in result if "error" not in r]

        def mean(key):
            vals = [max(0.0, r[key]) for r in scored]
            return round(sum(vals) / len(vals), 1) if vals else None
        return {
            "status": "ok" if scored else "failed: no summary could be dumped",
            "rows": result,
            "under_estimates_alone": sum(r["under_alone"] for r in scored),
            "under_estimates_pressure": sum(r["under_pressure"] for r in scored),
            "mean_over_alone_pct": mean("over_alone_pct"),
            "mean_over_pressure_pct": mean("over_pressure_pct"),
            "retrain": "not in this run (no Rust toolchain here): carma-train cv --estimator vision "
                       "--data labels.csv --summaries summaries/ on the build machine",
        }

    # --- the report ------------------------------------------------------------------------
    def write(self):
        self.report["seconds"] = round(time.time() - self.t0, 1)
        with open(os.path.join(self.out, "report.json"), "w") as f:
            json.dump(self.report, f, indent=2)
            f.write("\n")
        with open(os.path.join(self.out, "report.md"), "w") as f:
            f.write(render(self.report))


def table(rows, columns):
    if not rows:
        return "(no rows)\n"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def render(rep):
    s = rep["sections"]
    env = rep["environment"]
    out = [f"# carma on {'a fake GPU (dry run)' if rep['dry_run'] else 'a real GPU'}\n",
           f"Started {rep['started']}, {rep['seconds']} s in all. GPU: {env['gpu']}. carma: {env['carma']}. "
           f"torch: {env['torch']}. python: {env['python']}.\n"]
    if rep["dry_run"]:
        out.append("Dry run: the GPU is carma's fake GPU file, its memory a ledger the jobs write; the jobs, "
                   "the tick, the queue and the report are real. Figures below say nothing about hardware.\n")
    pending = {"status": "not run yet", "seconds": 0}
    s = {name: s.get(name, pending) for name in SECTIONS}
    n = s["nvml"]
    out.append(f"\n## 1. NVML and GPM against nvidia-smi\n\nStatus: **{n['status']}** ({n['seconds']} s). ")
    if "rows" in n:
        out.append(f"{n['samples']} samples with a training job running; SM activity source(s): "
                   f"{', '.join(n['sm_sources'])}. Largest |carma - nvidia-smi|: "
                   + ", ".join(f"{k} {v}" for k, v in n["max_abs_difference"].items()) + ". Raw: `nvml.csv`.\n\n")
        out.append(table(n["rows"][:12], ["t_s", "carma_used_mib", "smi_used_mib", "carma_reserved_mib",
                                          "smi_reserved_mib", "carma_sm_active", "carma_sm_source",
                                          "smi_util_gpu_pct", "carma_power_w", "smi_power_w",
                                          "carma_energy_mj", "smi_energy_mj", "carma_mig", "smi_mig"]))
    q = s["queue"]
    out.append(f"\n## 2. The tick on real jobs\n\nStatus: **{q['status']}** ({q['seconds']} s). ")
    if "tasks" in q:
        out.append(f"{q['ticks']} ticks 2 s apart; at most {q['max_running_at_once']} jobs ran at once; "
                   f"{q['oom_events']} OomDetected event(s), from the job's stderr: `{(q['oom_stderr_line'] or [''])[0]}`; "
                   f"relaunched alone: {q['relaunched_alone']}; MemoryExceeded: {q.get('memory_exceeded') or 'none'}; "
                   f"requeued: {q.get('requeued') or 'none'}; neighbours ran once: {q.get('neighbours_ran_once')}; "
                   f"ending: **{q.get('ending')}**.\n\n")
        out.append(table(q["tasks"], ["name", "id", "state", "attempts"]))
        out.append("\n`carma report`:\n\n```\n" + q["carma_report"].rstrip() + "\n```\n")
    out.append(render_recovery(s["recovery"]))
    m = s["mps"]
    out.append(f"\n## 4. MPS memory caps\n\nStatus: **{m['status']}** ({m['seconds']} s). ")
    if "cap_mib" in m:
        out.append(f"MPS: {m['mps']}. A job capped at {m['cap_mib']} MiB asking for twice that exited "
                   f"{m['over_cap_exit']} (`{(m['over_cap_stderr'] or [''])[0]}`); one within the cap exited "
                   f"{m['within_cap_exit']}.\n")
    lab = s["labels"]
    out.append(f"\n## 5. Labels under memory pressure\n\nStatus: **{lab['status']}** ({lab['seconds']} s).\n\n")
    if "rows" in lab:
        out.append("Peak alone (`max_gpu_memory_mib`, the device's use after each step, context included) and the "
                   "smallest cap under which training still runs (bisection with "
                   "`torch.cuda.set_per_process_memory_fraction`); `peak_under_pressure_mib` is context + what the "
                   "allocator reserved under that cap. The difference is what a card gives back when it is short. "
                   "CSV: `labels.csv` (carma-train's timm format plus these columns).\n\n")
        out.append(table(lab["rows"], ["model", "batch_size", "max_gpu_memory_mib", "peak_under_pressure_mib",
                                       "min_cap_mib", "context_mib", "probes"]))
        for line in lab["skipped"]:
            out.append(f"- skipped: {line}\n")
        ev = lab["evaluation"]
        out.append(f"\n### carma's estimate against both labels\n\nStatus: **{ev['status']}**.\n\n")
        if ev.get("rows"):
            out.append(table(ev["rows"], ["model", "batch_size", "carma_mib", "carma_upper_mib", "bound",
                                          "alone_mib", "under_pressure_mib", "over_alone_pct", "over_pressure_pct"]))
            out.append(f"\nUnder-estimates: {ev['under_estimates_alone']} against the peak alone, "
                       f"{ev['under_estimates_pressure']} against the peak under pressure. Mean over-provisioning: "
                       f"{ev['mean_over_alone_pct']}% and {ev['mean_over_pressure_pct']}%. Retraining: {ev['retrain']}.\n")
    return "".join(out)


def render_recovery(r):
    """Section 3: each case's ending, tasks and what carma recorded of their memory."""
    out = [f"\n## 3. Recovery: Finished after a relaunch\n\nStatus: **{r['status']}** ({r['seconds']} s). "
           "The only right ending of each case is Finished after a relaunch; a stop for memory without "
           "one fails the section.\n"]
    titles = {"underdeclared": "Under-declared, beside a neighbour left untouched",
              "oom_early": "Out of memory between two ticks, seen by the supervisor's readings"}
    for name, case in r.get("cases", {}).items():
        out.append(f"\n### {titles.get(name, name)}\n\nStatus: **{case['status']}**. ")
        if "ending" in case:
            out.append("Endings: " + "; ".join(f"{n}: **{e}**" for n, e in case["ending"].items()) + ".")
            if "first_attempt_lived_s" in case:
                out.append(f" The filler ({case['filler']}) ended at {case['filler_ended_at_s']} s; the first "
                           f"attempt lived {case['first_attempt_lived_s']} s with no tick; OomDetected peak "
                           f"{case['oom_peak_mib']} MiB: `{case['oom_evidence']}`.")
            out.append("\n\n")
            rows = [dict(t, memory_exceeded="; ".join(t["memory_exceeded"]) or "none",
                         requeued="; ".join(q.get("reason", "") for q in t["requeued"]) or "none")
                    for t in case["tasks"]]
            out.append(table(rows, ["name", "state", "attempts", "memory_exceeded", "requeued"]))
    return "".join(out)


def main():
    p = argparse.ArgumentParser(prog="run.sh")
    p.add_argument("--out", required=True)
    p.add_argument("--carma", required=True)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--label-minutes", type=float, default=12)
    p.add_argument("--deadline-minutes", type=float, help="finish everything within this many minutes")
    p.add_argument("--keep-work", action="store_true", help="keep the temporary queues (debugging)")
    p.add_argument("--only", help="comma-separated sections to run (" + ",".join(SECTIONS) + ")")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    kit = Kit(args)
    version = kit.run([kit.carma, "--version"]).stdout.strip()
    gpu = kit.hw.smi()
    kit.report["environment"] = {"carma": version, "gpu": f"{gpu['name']} ({gpu['memory.total']} MiB)",
                                 "torch": kit.torch or "not installed", "python": sys.version.split()[0]}
    wanted = set((args.only or ",".join(SECTIONS)).split(","))
    for name in SECTIONS:
        if name in wanted:
            kit.section(name, getattr(kit, name))
        else:
            kit.report["sections"][name] = {"status": "skipped: not asked for (--only)", "seconds": 0}
    kit.write()
    kit.hw.stop()
    if not args.keep_work:
        for scratch in ("work", "fake-gpu"):
            shutil.rmtree(os.path.join(kit.out, scratch), ignore_errors=True)
    failed = [n for n, r in kit.report["sections"].items() if not r["status"].startswith(("ok", "skipped"))]
    print(f"report: {os.path.join(kit.out, 'report.md')}" + (f"; not ok: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
