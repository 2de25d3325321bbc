//! A Slurm user's first week on a carma server (issue 42): the pipelines, filters and small
//! words they bring from squeue, scancel and sbatch.
//!
//! Goal: every id form `queue` prints is taken by `cancel`, `hold`, `release` and `update`
//! (`ID[4%1]`, `ID_[1,3]`, `ID_2`), as scancel takes squeue's; `cancel --state pending --name`
//! right after submit reaches the tasks still in the spool; a timed-out job ends TIMEOUT
//! (`TO`), with `show` giving the tail of the `-o` file its stderr went to; `update
//! --gpu-mem`, the dry run's signal and dependency, the `%a` note and the small messages.
//! Method: the real binary on a state directory with two fake GPUs; real ticks where a job
//! must run.

mod common;

use std::time::Duration;

use common::{TestHome, assert_error, stderr, stdout};

const TWO_GPUS: &str = r#"[
  {"uuid": "GPU-fake-0000", "name": "NVIDIA A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0},
  {"uuid": "GPU-fake-0001", "name": "NVIDIA A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0}
]"#;

fn home() -> TestHome {
    let home = TestHome::with_fake_gpus(TWO_GPUS, "magm");
    home.ok(&["tick"]);
    home
}

fn states(home: &TestHome) -> Vec<(String, String)> {
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--all", "--json"])).unwrap();
    queue["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_string(), t["state"].as_str().unwrap().to_string()))
        .collect()
}

/// Goal: `carma queue --me -o id --noheader | xargs carma cancel` works for an array: the
/// folded `ID[4%1]` names all of it, Slurm's `ID_[1,3]` some of it, in every verb.
#[test]
fn every_id_form_queue_prints_is_taken_by_every_verb() {
    let home = home();
    let array =
        home.ok(&["submit", "--parsable", "--hold", "--array", "0-3%1", "--name", "sw", "--", "true"]);
    let array = array.trim();
    home.ok(&["tick"]);
    let label = home.ok(&["queue", "--me", "-o", "id", "--noheader"]);
    let label = label.trim();
    assert!(label.ends_with("[4%1]") && array.starts_with(&label[..label.len() - 5]), "{label} for {array}");
    home.ok(&["release", label]);
    home.ok(&["hold", label]);
    home.ok(&["update", &format!("{array}_2"), "--priority", "0"]);
    let some = home.ok(&["cancel", &format!("{array}_[1,3]")]);
    assert_eq!(some.lines().filter(|l| l.starts_with("cancelled task ")).count(), 2, "{some}");
    let rest = home.ok(&["cancel", label]);
    assert_eq!(rest.lines().filter(|l| l.starts_with("cancelled task ")).count(), 2, "{rest}");
    assert!(states(&home).iter().all(|(_, state)| state == "Cancelled"), "{:?}", states(&home));
    assert_error(
        &home.run(&["cancel", &format!("{array}_[7-9]")]),
        2,
        &format!("{array}_[7-9]: array {array} has none of these indices; `carma queue -r` lists them"),
    );
}

/// Goal: `carma cancel --me --state pending --name 'sweep*'` right after submit cancels the
/// matching tasks still in the spool (sbatch's job is PENDING at once), and only those.
#[test]
fn cancel_by_state_and_name_reaches_tasks_still_in_the_spool() {
    let home = home();
    for name in ["sweep-a", "sweep-b", "other"] {
        home.ok(&["submit", "--hold", "--name", name, "--", "true"]);
    }
    let out = home.ok(&["cancel", "--me", "--state", "pending", "--name", "sweep*"]);
    assert_eq!(out.lines().filter(|l| l.contains("requested; the next tick applies it")).count(), 2, "{out}");
    home.ok(&["tick"]);
    let mut seen = states(&home);
    seen.sort();
    assert_eq!(
        seen,
        [
            ("other".into(), "Pending".into()),
            ("sweep-a".into(), "Cancelled".into()),
            ("sweep-b".into(), "Cancelled".into())
        ]
    );
}

/// Goal: a job stopped at its time limit ends TIMEOUT: `TO` in `queue`, `Timeout` in its
/// JSON, found by `--state timeout`; a failed script whose stderr went into its `-o` file (as
/// Slurm's default) has that file's tail in `show`; a requeued job's second attempt appends
/// to its `-o` file, keeping the first's output (`--open-mode=append`'s point).
#[test]
fn a_timed_out_job_is_timeout_and_show_tails_the_output_file() {
    let home = home();
    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(
        work.join("fails.sh"),
        "#!/bin/sh\n#SBATCH -o out-%j.log\n#SBATCH --gres=gpu:1\necho the real cause >&2\nexit 3\n",
    )
    .unwrap();
    let submit = |args: &[&str]| {
        let out = home.cmd().current_dir(&work).args(["submit", "--parsable"]).args(args).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().to_string()
    };
    std::fs::write(
        work.join("again.sh"),
        "#!/bin/sh\n#SBATCH -o again-%j.log\n#SBATCH --gres=gpu:1\necho attempt $CARMA_ATTEMPT\nif [ \"$CARMA_ATTEMPT\" = 1 ]; then exit 99; fi\n",
    )
    .unwrap();
    let slow = submit(&["-t", "2s", "--name", "slow", "--", "sleep", "60"]);
    let fails = submit(&["fails.sh"]);
    let again = submit(&["again.sh"]);
    home.tick_until_done(Duration::from_secs(60));
    let row = home.ok(&["queue", "--all", "-o", "id,st,state", "--noheader", "--state", "timeout"]);
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        [&slow[..row.split_whitespace().next().unwrap().len()], "TO", "Timeout"],
        "{row}"
    );
    assert!(home.ok(&["show", &slow]).contains("\nstate       Timeout (TO)\n"), "show says TIMEOUT too");
    let show = home.ok(&["show", &fails]);
    let file = work.join(format!("out-{fails}.log"));
    assert!(
        show.contains(&format!("stderr      last 1 line(s) of attempt 1 in {} (carma logs --stderr {fails}):\n  | the real cause\n", file.display())),
        "{show}"
    );
    let kept = std::fs::read_to_string(work.join(format!("again-{again}.log"))).unwrap();
    assert_eq!(kept, "attempt 1\nattempt 2\n", "the requeued attempt appends to its -o file");
}

/// Goal: the small words a Slurm user meets: `update --gpu-mem`, `--gpu-mem 12` answered about
/// `--gpu-mem`, `carma sbatch` pointing at `carma submit`, the submit help's examples, the dry
/// run's signal and dependency, and the note that `%a` is the attempt in carma's templates.
#[test]
fn the_small_words_are_slurm_users_words() {
    let home = home();
    let held = home.ok(&["submit", "--parsable", "--hold", "--", "true"]);
    let held = held.trim();
    home.ok(&["tick"]);
    home.ok(&["update", held, "--gpu-mem", "8GiB"]);
    home.ok(&["tick"]);
    let show: serde_json::Value = serde_json::from_str(&home.ok(&["show", held, "--json"])).unwrap();
    assert_eq!(show["task"]["spec"]["memory_mib"], 8192, "{show}");
    assert_error(
        &home.run(&["submit", "--gpu-mem", "12", "--", "true"]),
        2,
        "--gpu-mem 12 has no unit; give one, e.g. --gpu-mem 12GiB or --gpu-mem 12MiB",
    );
    let sbatch = home.run(&["sbatch", "--", "true"]);
    assert!(
        stderr(&sbatch).contains("(to queue a script on this server, carma submit SCRIPT)"),
        "{}",
        stderr(&sbatch)
    );
    let help = home.ok(&["submit", "--help"]);
    assert!(
        help.contains("carma submit --gpus 1 --gpu-mem 12GiB -- python train.py")
            && !help.contains("--mem 12GiB"),
        "{help}"
    );
    let dry =
        home.ok(&["submit", "--dry-run", "-t", "10m", "--signal", "USR1@60", "--after", held, "--", "true"]);
    assert!(dry.contains("\nsignal: USR1@60 (command line)\n"), "{dry}");
    assert!(dry.contains(&format!("\ndependency: afterok:{held} (command line)\n")), "{dry}");
    let out = home.run(&["submit", "--dry-run", "--array", "0-1", "-o", "x_%a.out", "--", "true"]);
    assert_eq!(
        stderr(&out),
        "note: --output x_%a.out: %a is the attempt (1, 2, ...) in carma's templates; for the array index write {index} (an #SBATCH line's %a is the index)\n"
    );
}

/// Goal: host CPUs and memory beyond this machine are refused where this queue enforces them
/// (a limit that could never hold), as Slurm refuses what its node cannot meet; where it
/// does not, the dry run says "not enforced here".
#[test]
fn host_limits_beyond_the_machine_are_refused_where_enforced() {
    let home = home();
    let (cpus, mib) = carma::exec::hostlimit::machine().expect("this machine's CPUs and memory");
    let root = carma::access::uid::effective() == 0;
    let asked_cpus = (cpus + 1).to_string();
    let out = home.run(&["submit", "--dry-run", "-c", &asked_cpus, "--", "true"]);
    match carma::exec::hostlimit::unenforced_here(root, "cpu") {
        None => assert_error(
            &out,
            2,
            &format!(
                "command line: {} CPUs: this machine has {cpus}; ask for at most {cpus} (cpus, -c)",
                cpus + 1
            ),
        ),
        Some(why) => assert!(
            stdout(&out).contains(&format!("CPUs: {asked_cpus} (command line); not enforced here ({why})")),
            "{}",
            stdout(&out)
        ),
    }
    let asked_mib = format!("{}M", mib + 1024);
    let out = home.run(&["submit", "--dry-run", "--host-mem", &asked_mib, "--", "true"]);
    match carma::exec::hostlimit::unenforced_here(root, "memory") {
        None => assert_error(
            &out,
            2,
            &format!(
                "command line: host memory {} MiB: this machine has {mib} MiB; ask for at most {mib}M (host_mem, --mem)",
                mib + 1024
            ),
        ),
        Some(why) => {
            assert!(stdout(&out).contains(&format!("not enforced here ({why})")), "{}", stdout(&out))
        }
    }
}
