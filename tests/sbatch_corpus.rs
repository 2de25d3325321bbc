//! A Slurm user's scripts run as they are (issues 33 and 42): 35 GPU sbatch scripts written
//! after the patterns of public repositories (tests/data/sbatch/README.md), each submitted
//! unchanged; 26 to 35, issue 42's tryout with `srun` and command-line options, are in
//! `sbatch_corpus/tryout.rs`.
//!
//! Goal: each gets the GPUs, time limit, array size, name and output file Slurm's rules give,
//! with every note and refusal of the script in one run, in exact words; an array's tasks see
//! Slurm's variables with Slurm's meanings.
//! Method: the real binary, `carma submit --dry-run` on a state directory whose tick has seen
//! four fake A100s; one array script submitted for real and run by real ticks.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::skip::{Need, is_root, skip};
use common::{TestHome, stderr, stdout};

const FOUR_A100: &str = r#"[
  {"uuid": "GPU-fake-0000", "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "memory_used_mib": 0, "sm_active": 0.0},
  {"uuid": "GPU-fake-0001", "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "memory_used_mib": 0, "sm_active": 0.0},
  {"uuid": "GPU-fake-0002", "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "memory_used_mib": 0, "sm_active": 0.0},
  {"uuid": "GPU-fake-0003", "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "memory_used_mib": 0, "sm_active": 0.0}
]"#;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sbatch")
}

/// A queue on four fake A100s that mails (so `--mail-user` is accepted), its inventory taken.
fn home() -> TestHome {
    let home = TestHome::with_fake_gpus(FOUR_A100, "magm");
    let config = std::fs::read_to_string(home.path().join("config.toml")).unwrap();
    home.set_config(&format!("{config}\n[notify]\nsendmail = \"/bin/true\"\n"));
    home.ok(&["tick"]);
    // 19_cluster_only.sh names `--reservation=conference`: sbatch refuses a reservation that
    // does not exist, and so does carma, so the site has one, for this user.
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() }.to_string();
    let reserve =
        ["reserve", "create", "--name", "conference", "--gpus", "1", "--start", "now", "--duration", "1h"];
    home.ok(&[&reserve[..], &["--users", me.as_str()]].concat());
    home
}

/// What Slurm's rules give for an accepted script.
struct Accepted {
    file: &'static str,
    gpus: u32,
    time: &'static str,
    /// `none`, or `N tasks[, at most M at once]`.
    array: &'static str,
    name: &'static str,
    /// The output template as the first task gets it (`<A>`: the array's id, `<N>` this
    /// server's name).
    output: &'static str,
    /// The error template when `-e` names one; `""`: into the output file, as Slurm's.
    error: &'static str,
    /// Every note, `LINE: #SBATCH OPTION: text`, in the script's order.
    notes: &'static [&'static str],
}

/// Why this machine's queue (the test's user's, root or not) would not enforce a limit of
/// `controller`, as carma decides it; `None` where it would, and then no note is due.
fn unenforced(controller: &str) -> Option<String> {
    carma::exec::hostlimit::unenforced_here(carma::access::uid::effective() == 0, controller)
}

/// The note on a directive: its parts that apply here, joined; `None` when none does.
fn note(at: &str, parts: &[Option<String>]) -> Option<String> {
    let parts: Vec<&str> = parts.iter().flatten().map(String::as_str).collect();
    (!parts.is_empty()).then(|| format!("{at}: {}", parts.join("; ")))
}

/// `N CPU(s): not enforced here (why)`, where it is not.
fn cpus_unenforced(total: u32) -> Option<String> {
    unenforced("cpu").map(|why| format!("{total} CPU(s): not enforced here ({why})"))
}

/// `host memory M MiB: not enforced here (why)`, where it is not.
fn memory_unenforced(mib: u64) -> Option<String> {
    unenforced("memory").map(|why| format!("host memory {mib} MiB: not enforced here ({why})"))
}

/// What the host limits of each accepted script are: host memory in MiB, CPUs, requeue as
/// the dry run words it; scripts not listed have none.
fn host_limits(file: &str) -> (&'static str, &'static str, &'static str) {
    const DEFAULT: &str = "the queue's default";
    match file {
        "01_gpt2_single_node.sh" => ("no limit", "32", DEFAULT),
        "04_lightning_requeue.sh" => ("no limit", "no limit", "yes: may be preempted and requeued"),
        "05_detection_gpus_per_node.sh" => ("81920 MiB", "20", DEFAULT),
        "07_deepspeed_array.sh" => ("32768 MiB", "8", DEFAULT),
        "08_wiki_single_gpu_mail.sh" => ("8192 MiB", "2", DEFAULT),
        "09_cluster_guide_days_hours.sh" => ("8000 MiB", "no limit", DEFAULT),
        "13_days_hours_minutes.sh" => ("no limit", "16", DEFAULT),
        "18_checkpoint_signal.sh" => ("no limit", "no limit", "yes: may be preempted and requeued"),
        "21_export_chdir_begin.sh" => {
            ("no limit", "no limit", "no: never requeued (not preempted, a lost attempt not retried)")
        }
        "23_array_env.sh" => ("no limit", "2", DEFAULT),
        "24_mem_env.sh" => ("2048 MiB", "2", DEFAULT),
        "25_mem_per_cpu_env.sh" => {
            ("2048 MiB", "2", "no: never requeued (not preempted, a lost attempt not retried)")
        }
        _ => ("no limit", "no limit", DEFAULT),
    }
}
const ONE_NODE: &str = "this server is one node; always so here";
const SCONTROL: &str = "scontrol is a Slurm command and there is no Slurm here; carma's own are carma queue, show, cancel and requeue";

fn accepted() -> Vec<Accepted> {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let notes = |items: Vec<Option<String>>| -> &'static [&'static str] {
        Box::leak(items.into_iter().flatten().map(leak).collect::<Vec<_>>().into_boxed_slice())
    };
    let mem_only = |at: &str, mib: u64| note(at, &[memory_unenforced(mib)]);
    let cpus_only = |at: &str, n: u32| note(at, &[cpus_unenforced(n)]);
    vec![
        Accepted {
            file: "01_gpt2_single_node.sh",
            gpus: 4,
            time: "2d",
            array: "none",
            name: "gpt2-124m",
            output: "logs/%x-%j.out",
            error: "",
            notes: notes(vec![
                Some(format!("3: #SBATCH --nodes=1: {ONE_NODE}")),
                cpus_only("6: #SBATCH --cpus-per-task=32", 32),
                Some("8: #SBATCH --exclusive: whole nodes: only matter on a cluster; GPUs given to a task are its own".into()),
            ]),
        },
        Accepted {
            file: "04_lightning_requeue.sh",
            gpus: 2,
            time: "2h",
            array: "none",
            name: "04_lightning_requeue.sh",
            output: "slurm-%j.out",
            error: "",
            notes: notes(vec![
                Some(format!("4: #SBATCH --nodes=1: {ONE_NODE}")),
                Some("7: #SBATCH --mem=0: 0 asks for all of the node's memory: no host memory limit".into()),
            ]),
        },
        Accepted {
            file: "05_detection_gpus_per_node.sh",
            gpus: 2,
            time: "3d",
            array: "none",
            name: "mask_rcnn_R50",
            output: "/dev/null",
            error: "det_%j.err",
            notes: notes(vec![
                note(
                    "5: #SBATCH --cpus-per-task=10",
                    &[Some("10 CPUs per task × 2 tasks on one node".into()), cpus_unenforced(20)],
                ),
                note(
                    "6: #SBATCH --mem-per-cpu=4G",
                    &[Some("4096 MiB per CPU × 20 CPU(s)".into()), memory_unenforced(81920)],
                ),
                Some("8: #SBATCH --partition=gpu: partitions: only matter on a cluster; ignored".into()),
                Some("9: #SBATCH --constraint=volta32gb: node features: only matter on a cluster; ignored".into()),
            ]),
        },
        Accepted {
            file: "07_deepspeed_array.sh",
            gpus: 2,
            time: "2d",
            array: "6 tasks, at most 2 at once",
            name: "ds-zero",
            output: "ds_<A>_0.out",
            error: "",
            notes: notes(vec![
                note("5: #SBATCH --mem-per-cpu=4G", &[Some("4096 MiB per CPU × 8 CPU(s)".into()), memory_unenforced(32768)]),
                cpus_only("6: #SBATCH --cpus-per-task=8", 8),
            ]),
        },
        Accepted {
            file: "08_wiki_single_gpu_mail.sh",
            gpus: 1,
            time: "5m",
            array: "none",
            name: "torch-test",
            output: "slurm-%j.out",
            error: "",
            notes: notes(vec![
                Some(format!("3: #SBATCH --nodes=1: {ONE_NODE}")),
                cpus_only("5: #SBATCH --cpus-per-task=2", 2),
                mem_only("6: #SBATCH --mem=8G", 8192),
            ]),
        },
        Accepted {
            file: "09_cluster_guide_days_hours.sh",
            gpus: 1,
            time: "12h",
            array: "none",
            name: "09_cluster_guide_days_hours.sh",
            output: "myoutput_%j.out",
            error: "myerrors_%j.err",
            notes: notes(vec![
                Some(format!("3: #SBATCH -N 1: {ONE_NODE}")),
                Some("5: #SBATCH -p gpu: partitions: only matter on a cluster; ignored".into()),
                mem_only("6: #SBATCH --mem=8000", 8000),
            ]),
        },
        Accepted {
            file: "10_sweep_array_minutes.sh",
            gpus: 1,
            time: "15m",
            array: "10 tasks, at most 3 at once",
            name: "lr-sweep",
            output: "logs/<A>_1.out",
            error: "",
            notes: &[],
        },
        Accepted {
            file: "11_minutes_seconds.sh",
            gpus: 1,
            time: "30m",
            array: "none",
            name: "smoke",
            output: "smoke.%j.<N>.log",
            error: "",
            notes: &[],
        },
        Accepted {
            file: "12_two_weeks.sh",
            gpus: 2,
            time: "14d",
            array: "none",
            name: "pretrain-long",
            output: "pretrain-%j.out",
            error: "pretrain-%j.err",
            notes: &["4: #SBATCH --qos=long: QOS: only matters on a cluster; ignored"],
        },
        Accepted {
            file: "13_days_hours_minutes.sh",
            gpus: 2,
            time: "1d 12h 30m",
            array: "none",
            name: "vit-b16",
            output: "slurm-%j.out",
            error: "",
            notes: notes(vec![cpus_only("4: #SBATCH -c 16", 16)]),
        },
        Accepted {
            file: "14_unlimited.sh",
            gpus: 1,
            time: "none",
            array: "none",
            name: "notebook",
            output: "slurm-%j.out",
            error: "",
            notes: &[
                "4: #SBATCH --account=vision-lab: accounts: only matter on a cluster; ignored",
                "5: #SBATCH --qos=normal: QOS: only matters on a cluster; ignored",
            ],
        },
        Accepted {
            file: "17_gpus_per_task.sh",
            gpus: 2,
            time: "6h",
            array: "none",
            name: "ddp-2",
            output: "slurm-%j.out",
            error: "",
            notes: notes(vec![
                Some("3: #SBATCH --gpus-per-task=1: 1 per task × 2 tasks on one node".into()),
                Some("4: #SBATCH --cpus-per-gpu=6: CPUs are not reserved or limited on this server; ignored".into()),
            ]),
        },
        Accepted {
            file: "18_checkpoint_signal.sh",
            gpus: 1,
            time: "4h",
            array: "none",
            name: "resumable",
            output: "resumable-%j.log",
            error: "",
            notes: notes(vec![
                Some("7: #SBATCH --open-mode=append: a requeued or retried attempt appends to the output file, so earlier output is kept; the first attempt truncates it".into()),
                Some(format!("10: {SCONTROL}")),
            ]),
        },
        Accepted {
            file: "19_cluster_only.sh",
            gpus: 1,
            time: "20m",
            array: "none",
            name: "eval",
            output: "slurm-%j.out",
            error: "",
            notes: &[
                "2: #SBATCH -A proj-123: accounts: only matter on a cluster; ignored",
                "2: #SBATCH -q gpu-normal: QOS: only matters on a cluster; ignored",
                "3: #SBATCH -C a100&ib: node features: only matter on a cluster; ignored",
                "4: #SBATCH -L scratch:1: licenses: only matter on a cluster; ignored",
                "5: #SBATCH --clusters=gpucluster: clusters: only matter on a cluster; ignored",
                "6: #SBATCH -w gpunode07: node lists: only matter on a cluster; ignored",
                "7: #SBATCH --exclude=gpunode01: node lists: only matter on a cluster; ignored",
                "9: #SBATCH --hint=nomultithread: CPU layout: CPUs are not reserved on this server; ignored",
            ],
        },
        Accepted {
            file: "20_comments_and_quotes.sh",
            gpus: 1,
            time: "1h 30m",
            array: "none",
            name: "quoted-name",
            output: "out dir/%x.out",
            error: "",
            notes: &[],
        },
        Accepted {
            file: "21_export_chdir_begin.sh",
            gpus: 1,
            time: "3h",
            array: "none",
            name: "offline-run",
            output: "slurm-%j.out",
            error: "",
            notes: &[],
        },
        Accepted {
            file: "23_array_env.sh",
            gpus: 1,
            time: "5m",
            array: "3 tasks",
            name: "envdump",
            output: "env_<A>_3.out",
            error: "",
            notes: notes(vec![cpus_only("5: #SBATCH --cpus-per-task=2", 2)]),
        },
        Accepted {
            file: "24_mem_env.sh",
            gpus: 1,
            time: "5m",
            array: "none",
            name: "memdump",
            output: "mem_%j.out",
            error: "",
            notes: notes(vec![mem_only("3: #SBATCH --mem=2G", 2048), cpus_only("4: #SBATCH -c 2", 2)]),
        },
        Accepted {
            file: "25_mem_per_cpu_env.sh",
            gpus: 1,
            time: "5m",
            array: "none",
            name: "cpudump",
            output: "cpu_%j.out",
            error: "",
            notes: notes(vec![
                note("3: #SBATCH --mem-per-cpu=1G", &[Some("1024 MiB per CPU × 2 CPU(s)".into()), memory_unenforced(2048)]),
                note("5: #SBATCH --cpus-per-task=1", &[Some("1 CPUs per task × 2 tasks on one node".into()), cpus_unenforced(2)]),
            ]),
        },
    ]
}

/// The refused scripts: every refusal (`LINE: #SBATCH OPTION: why`) and note, in one run.
fn refused() -> Vec<(&'static str, Vec<String>, Vec<String>)> {
    vec![
        (
            "02_translation_two_nodes.sh",
            vec![
                "4: #SBATCH --nodes=2: 2 nodes: this server is one node; ask for the GPUs one node has with --gpus N".into(),
                "6: #SBATCH --gpus-per-node=8: 8 GPUs: this server has 4; ask for at most --gpus 4 (on the command line it wins over this line)".into(),
            ],
            vec![
                Some("3: #SBATCH --partition=learn: partitions: only matter on a cluster; ignored".into()),
                note(
                    "7: #SBATCH --cpus-per-task=10",
                    &[Some("10 CPUs per task × 8 tasks on one node".into()), cpus_unenforced(80)],
                ),
                note("8: #SBATCH --mem=480G", &[memory_unenforced(491520)]),
                Some("12: #SBATCH --open-mode=append: a requeued or retried attempt appends to the output file, so earlier output is kept; the first attempt truncates it".into()),
            ]
            .into_iter()
            .flatten()
            .collect(),
        ),
        (
            "03_accelerate_multinode.sh",
            vec!["6: #SBATCH --nodes=4: 4 nodes: this server is one node; ask for the GPUs one node has with --gpus N".into()],
            [note("8: #SBATCH --cpus-per-task=96", &[cpus_unenforced(96)]), Some(format!("13: {SCONTROL}"))]
                .into_iter()
                .flatten()
                .collect(),
        ),
        (
            "06_mmdet_srun_option.sh",
            vec!["7: #SBATCH --kill-on-bad-exit=1: --kill-on-bad-exit is not an sbatch option; the README's \"Slurm users\" table lists them".into()],
            [
                Some("2: #SBATCH -p dev: partitions: only matter on a cluster; ignored".into()),
                note("6: #SBATCH --cpus-per-task=5", &[Some("5 CPUs per task × 2 tasks on one node".into()), cpus_unenforced(10)]),
            ]
            .into_iter()
            .flatten()
            .collect(),
        ),
        (
            "15_gpu_type_missing.sh",
            vec!["2: #SBATCH --gres=gpu:v100:1: this server has no v100 GPU (it has NVIDIA A100-SXM4-80GB); drop the type (--gres=gpu:1), or give --gpus N on the command line, which wins".into()],
            vec![],
        ),
        ("16_too_many_gpus.sh", vec!["2: #SBATCH --gpus=16: 16 GPUs: this server has 4; ask for at most --gpus 4 (on the command line it wins over this line)".into()], vec![]),
        (
            "22_colossal_mem_per_gpu.sh",
            vec!["7: #SBATCH --dependency=singleton: singleton (one running task per name) is not supported; name the task to wait for: --after ID".into()],
            vec!["4: #SBATCH --mem-per-gpu=32G: host memory per GPU (32768 MiB) is not limited; use --mem for the whole job's; GPU memory per GPU is --gpu-mem SIZE".into()],
        ),
    ]
}

/// The value of the dry run's `label: value (source)` line.
fn value<'a>(text: &'a str, label: &str) -> &'a str {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{label}: ")))
        .unwrap_or_else(|| panic!("no {label} in\n{text}"));
    let rest = &line[label.len() + 2..];
    rest.rfind(" (").map_or(rest, |at| &rest[..at])
}

/// The value of a host limit's line, `VALUE (source)[; enforced … | not enforced here (why)]`.
fn limit<'a>(text: &'a str, label: &str) -> &'a str {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{label}: ")))
        .unwrap_or_else(|| panic!("no {label} in\n{text}"));
    let rest = &line[label.len() + 2..];
    rest.split(" (").next().unwrap_or(rest)
}

/// Goal: each accepted script, unchanged, gets what Slurm's rules give, with every note in
/// exact words and nothing else on stderr.
#[test]
fn every_accepted_script_gets_what_slurms_rules_give() {
    let home = home();
    let node = carma::spec::sbatch::node_name();
    let mut seen = 0;
    let mut beyond = 0;
    for case in accepted() {
        let out = home.cmd().current_dir(corpus()).args(["submit", "--dry-run", case.file]).output().unwrap();
        let (text, err) = (stdout(&out), stderr(&out));
        if let Some(refusal) = beyond_this_machine(case.file) {
            assert_eq!((err.as_str(), out.status.code()), (refusal.as_str(), Some(2)), "{}", case.file);
            beyond += 1;
            continue;
        }
        assert!(out.status.success(), "{}: {err}", case.file);
        let notes: String = case.notes.iter().map(|n| format!("note: {}:{n}\n", case.file)).collect();
        assert_eq!(err, notes, "{}: notes", case.file);
        assert_eq!(value(&text, "GPUs"), case.gpus.to_string(), "{}", case.file);
        assert_eq!(value(&text, "time limit"), case.time, "{}", case.file);
        let array = value(&text, "array");
        let (array, id) = array.split_once(", array id ").unwrap_or((array, "<none>"));
        assert_eq!(array, case.array, "{}", case.file);
        assert_eq!(value(&text, "name"), case.name, "{}", case.file);
        let (host_mem, cpus, requeue) = host_limits(case.file);
        assert_eq!(limit(&text, "host memory"), host_mem, "{}", case.file);
        assert_eq!(limit(&text, "CPUs"), cpus, "{}", case.file);
        assert_eq!(value(&text, "requeue"), requeue, "{}", case.file);
        let output = case.output.replace("<A>", id).replace("<N>", &node);
        assert_eq!(value(&text, "output"), output, "{}", case.file);
        let error = if case.error.is_empty() { output.clone() } else { case.error.to_string() };
        assert_eq!(
            value(&text, "error"),
            error,
            "{}: without -e stderr goes into the output file",
            case.file
        );
        seen += 1;
    }
    assert_eq!(seen + beyond, 19);
    eprintln!("{beyond} of 19 scripts ask for more host CPUs or memory than this machine has");
}

/// The refusal a script gets where its host limits are enforced and this machine has fewer
/// CPUs or less memory than they ask (Slurm refuses what its node cannot meet); `None` where
/// the script fits.
fn beyond_this_machine(file: &str) -> Option<String> {
    let (memory, cpus, _) = host_limits(file);
    let (machine_cpus, machine_mib) = carma::exec::hostlimit::machine()?;
    let cpus = cpus.parse::<u32>().ok().filter(|n| unenforced("cpu").is_none() && *n > machine_cpus);
    if let Some(n) = cpus {
        return Some(format!(
            "error: {file}: {n} CPUs: this machine has {machine_cpus}; ask for at most {machine_cpus} (cpus, -c)\n"
        ));
    }
    let mib = memory.strip_suffix(" MiB").and_then(|m| m.parse::<u64>().ok());
    let mib = mib.filter(|m| unenforced("memory").is_none() && *m > machine_mib)?;
    Some(format!(
        "error: {file}: host memory {mib} MiB: this machine has {machine_mib} MiB; ask for at most {machine_mib}M (host_mem, --mem)\n"
    ))
}

/// Goal: a refused script names every refusal and note at once, each with file and line, and
/// exits 2 with nothing submitted.
#[test]
fn every_refused_script_names_all_its_problems_in_one_run() {
    let home = home();
    for (file, refusals, notes) in refused() {
        let out = home.cmd().current_dir(corpus()).args(["submit", file]).output().unwrap();
        let expected = if refusals.len() == 1 && notes.is_empty() {
            format!("error: {file}:{}\n", refusals[0])
        } else {
            let mut text = format!(
                "error: {file}: {} problem(s) in its directives; nothing submitted:\n",
                refusals.len()
            );
            text.extend(refusals.iter().map(|r| format!("  {file}:{r}\n")));
            text.extend(notes.iter().map(|n| format!("  note: {file}:{n}\n")));
            text
        };
        assert_eq!(stderr(&out), expected, "{file}");
        assert_eq!(out.status.code(), Some(2), "{file}");
    }
    // Nothing submitted: no rows (under a pipe queue's "no tasks" note goes to stderr).
    assert_eq!(home.ok(&["queue", "--all"]), "", "nothing submitted");
}

/// Goal: the dry run names the directive that set each setting, `#CARMA` over `#SBATCH`, the
/// command line over both.
#[test]
fn the_dry_run_says_which_directive_set_each_setting() {
    let home = home();
    // Its `-o logs/%A_%a.out` needs the folder where it is submitted from (checked at submit).
    std::fs::create_dir(home.path().join("logs")).unwrap();
    let file = corpus().join("10_sweep_array_minutes.sh");
    let out = home
        .cmd()
        .current_dir(home.path())
        .args(["submit", "--dry-run", "-J", "mine"])
        .arg(&file)
        .output()
        .unwrap();
    let text = stdout(&out);
    let shown = file.display();
    assert!(text.contains(&format!("\nGPUs: 1 ({shown}:3 #SBATCH --gres=gpu:1)\n")), "{text}");
    assert!(text.contains(&format!("\ntime limit: 15m ({shown}:4 #SBATCH --time=15)\n")), "{text}");
    assert!(text.contains("\nname: mine (command line)\n"), "{text}");
    assert!(
        text.contains("\nGPU memory: not declared: shares a GPU, assumed 5.0 GiB; give --gpu-mem to say more (default)\n"),
        "{text}"
    );
}

/// Goal: an array script's tasks see Slurm's variables with Slurm's meanings.
#[test]
fn an_array_scripts_tasks_see_slurms_variables() {
    let home = home();
    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::copy(corpus().join("23_array_env.sh"), work.join("23_array_env.sh")).unwrap();
    let out =
        home.cmd().current_dir(&work).args(["submit", "--parsable", "23_array_env.sh"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let array = stdout(&out).trim().to_string();
    home.tick_until_done(Duration::from_secs(60));
    let queue: serde_json::Value = serde_json::from_str(&home.ok(&["queue", "--all", "--json"])).unwrap();
    let node = carma::spec::sbatch::node_name();
    for index in 3..=5 {
        let text = std::fs::read_to_string(work.join(format!("env_{array}_{index}.out"))).unwrap();
        let vars: std::collections::BTreeMap<&str, &str> =
            text.lines().filter_map(|l| l.split_once('=')).collect();
        let id = queue["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| {
                t["name"] == "envdump"
                    && t["id"].as_str().is_some_and(|id| vars.get("SLURM_JOB_ID") == Some(&id))
            })
            .map(|t| t["id"].as_str().unwrap().to_string());
        assert!(id.is_some(), "SLURM_JOB_ID is one of the array's task ids: {text}");
        assert!(text.starts_with(&format!("task {index} of 3\n")), "{text}");
        let expected = [
            ("SLURM_ARRAY_JOB_ID", array.as_str()),
            ("SLURM_ARRAY_TASK_ID", &index.to_string()),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "3"),
            ("SLURM_ARRAY_TASK_MAX", "5"),
            ("SLURM_JOB_NAME", "envdump"),
            ("SLURM_SUBMIT_DIR", work.to_str().unwrap()),
            ("SLURM_CPUS_PER_TASK", "2"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "0"),
            ("SLURM_JOB_NUM_NODES", "1"),
            ("SLURM_RESTART_COUNT", "0"),
            ("SLURMD_NODENAME", node.as_str()),
        ];
        for (key, want) in expected {
            assert_eq!(vars.get(key).copied(), Some(want), "{key} in\n{text}");
        }
        let gpus = vars.get("SLURM_JOB_GPUS").copied().unwrap_or_default();
        assert!(["0", "1", "2", "3"].contains(&gpus), "SLURM_JOB_GPUS is a GPU index: {gpus:?}");
    }
}

/// Goal: GPU memory is `--gpu-mem`; carma 0.x's `--mem` (flag or `#CARMA` line) still means
/// it for this release, with the warning; Slurm's units in either case.
#[test]
fn gpu_memory_is_gpu_mem_and_the_old_mem_warns() {
    let home = home();
    let warning = "warning: --mem is GPU memory in carma 0.x and becomes host memory; write --gpu-mem\n";
    let old = home.run(&["submit", "--dry-run", "--mem", "2GiB", "--", "true"]);
    assert_eq!(stderr(&old), warning);
    assert_eq!(value(&stdout(&old), "GPU memory"), "2048 MiB per GPU");
    let new = home.run(&["submit", "--dry-run", "--gpu-mem", "3g", "--", "true"]);
    assert_eq!(stderr(&new), "");
    assert_eq!(value(&stdout(&new), "GPU memory"), "3072 MiB per GPU");
    let script = home.path().join("old.sh");
    std::fs::write(&script, "#!/bin/sh\n#CARMA --mem 1GiB\n#SBATCH --mem=1G\ntrue\n").unwrap();
    let out = home.cmd().current_dir(home.path()).args(["submit", "--dry-run", "old.sh"]).output().unwrap();
    assert_eq!(
        stderr(&out),
        format!(
            "{}{warning}",
            note("3: #SBATCH --mem=1G", &[memory_unenforced(1024)])
                .map_or(String::new(), |n| format!("note: old.sh:{n}\n"))
        )
    );
    assert_eq!(value(&stdout(&out), "GPU memory"), "1024 MiB per GPU");
}

/// Goal: a script's mail options, on a queue that sends no mail, are noted, not refused (a
/// carma flag `--mail-user` there is still refused, as before).
#[test]
fn mail_in_a_script_on_a_queue_without_mail_is_a_note() {
    let home = TestHome::with_fake_gpus(FOUR_A100, "magm");
    home.ok(&["tick"]);
    let file = "08_wiki_single_gpu_mail.sh";
    let out = home.cmd().current_dir(corpus()).args(["submit", "--dry-run", file]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let none = "this queue sends no mail (its administrator set no sendmail); ignored";
    let err = stderr(&out);
    for line in [9, 10, 11] {
        assert!(err.contains(&format!("note: {file}:{line}: #SBATCH --mail-")), "{err}");
    }
    assert_eq!(err.matches(none).count(), 3, "{err}");
}

/// Goal: the host memory and CPU scripts' jobs are told what Slurm tells them:
/// `SLURM_MEM_PER_NODE` for `--mem` (`SLURM_MEM_PER_CPU` alone for `--mem-per-cpu`),
/// `SLURM_CPUS_PER_TASK` (`-c`), `SLURM_NTASKS` and `SLURM_CPUS_ON_NODE` (`-c` × `-n`).
/// Method: both scripts submitted unchanged and run by real ticks; their output files read.
#[test]
fn the_host_memory_scripts_jobs_see_slurms_memory_and_cpu_variables() {
    let home = home();
    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut ids = Vec::new();
    for file in ["24_mem_env.sh", "25_mem_per_cpu_env.sh"] {
        std::fs::copy(corpus().join(file), work.join(file)).unwrap();
        let out = home.cmd().current_dir(&work).args(["submit", "--parsable", file]).output().unwrap();
        assert!(out.status.success(), "{file}: {}", stderr(&out));
        ids.push(stdout(&out).trim().to_string());
    }
    home.tick_until_done(Duration::from_secs(60));
    let expected: [(&str, &[(&str, &str)]); 2] = [
        (
            "mem",
            &[
                ("SLURM_CPUS_ON_NODE", "2"),
                ("SLURM_CPUS_PER_TASK", "2"),
                ("SLURM_MEM_PER_NODE", "2048"),
                ("SLURM_NPROCS", "1"),
                ("SLURM_NTASKS", "1"),
            ],
        ),
        (
            "cpu",
            &[
                ("SLURM_CPUS_ON_NODE", "2"),
                ("SLURM_CPUS_PER_TASK", "1"),
                ("SLURM_MEM_PER_CPU", "1024"),
                ("SLURM_NPROCS", "2"),
                ("SLURM_NTASKS", "2"),
            ],
        ),
    ];
    for ((prefix, want), id) in expected.iter().zip(&ids) {
        let text = std::fs::read_to_string(work.join(format!("{prefix}_{id}.out"))).unwrap();
        let seen: std::collections::BTreeMap<&str, &str> =
            text.lines().filter_map(|l| l.split_once('=')).collect();
        assert_eq!(seen, want.iter().copied().collect(), "{prefix}_{id}.out:\n{text}");
    }
}

/// Goal: a job that allocates more host memory than its `#SBATCH --mem` is killed by the
/// kernel and journaled Failed with the host-memory reason (no OomDetected, no requeue);
/// one within its limit finishes; a job with `-c 1` runs under a quota of one CPU. Method:
/// two Python scripts (no shell) that touch every page of 300 MiB and of 8 MiB under
/// `--mem=64M`, and one that prints its CPU cgroup's quota file, run by real ticks; skipped
/// where this queue cannot set the limit (not root, neither a delegated cgroup v2 memory
/// controller nor a cgroup v1 one).
#[test]
fn a_job_over_its_host_memory_is_killed_and_fails_naming_host_memory() {
    if !is_root() {
        return skip(Need::Root, "only a root tick sets a job's cgroup");
    }
    if let Some(why) = unenforced("memory") {
        return skip(Need::CgroupMemory, &why);
    }
    if std::process::Command::new("python3").arg("-c").arg("pass").status().is_err() {
        return skip(Need::Python3, "the jobs are python3 scripts");
    }
    let home = home();
    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let script = |mib: u32| {
        format!(
            "#!/usr/bin/env python3\n#SBATCH --mem=64M\n#SBATCH --gres=gpu:1\n#SBATCH --time=2\nb = bytearray({mib} * 1024 * 1024)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\nprint('touched', {mib}, 'MiB')\n"
        )
    };
    let mut ids = Vec::new();
    for (file, mib) in [("hog.py", 300), ("fits.py", 8)] {
        std::fs::write(work.join(file), script(mib)).unwrap();
        let out = home.cmd().current_dir(&work).args(["submit", "--parsable", file]).output().unwrap();
        assert!(out.status.success(), "{file}: {}", stderr(&out));
        ids.push(stdout(&out).trim().to_string());
    }
    std::fs::write(work.join("quota.py"), CPU_QUOTA_SCRIPT).unwrap();
    let out = home.cmd().current_dir(&work).args(["submit", "--parsable", "quota.py"]).output().unwrap();
    assert!(out.status.success(), "quota.py: {}", stderr(&out));
    let quota_id = stdout(&out).trim().to_string();
    home.tick_until_done(Duration::from_secs(90));
    if unenforced("cpu").is_none() {
        let text = std::fs::read_to_string(work.join(format!("quota-{quota_id}.out"))).unwrap();
        let v1 = carma::exec::cgroup::uses_v1("cpu");
        let (file, value) = if v1 { ("cpu.cfs_quota_us", "100000") } else { ("cpu.max", "100000 100000") };
        let own = format!("carma.jobs/carma-task-{quota_id}-1 {value}");
        assert!(
            text.lines().any(|line| line.starts_with(&format!("{file} ")) && line.ends_with(&own)),
            "one CPU's quota in the job's own cgroup ({file}):\n{text}"
        );
    }
    let events = home.events();
    let of = |id: &str, kind: &str| -> Vec<serde_json::Value> {
        events
            .iter()
            .filter(|e| e["kind"] == kind && e["data"]["task"] == id)
            .map(|e| e["data"].clone())
            .collect()
    };
    let (hog, fits) = (&ids[0], &ids[1]);
    assert_eq!(of(fits, "Finished").len(), 1, "the job within its limit finishes");
    let failed = of(hog, "Failed");
    assert_eq!(failed.len(), 1, "the hog fails once: {events:?}");
    let reason = failed[0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("out of host memory: the kernel killed "), "{reason}");
    let counter = if carma::exec::cgroup::uses_v1("memory") { "memory.oom_control" } else { "memory.events" };
    assert!(
        reason.ends_with(&format!(" process(es) at the job's host memory limit of 64 MiB ({counter} oom_kill); not a GPU out-of-memory, not retried; raise --mem (host_mem) and resubmit")),
        "{reason}"
    );
    assert!(of(hog, "OomDetected").is_empty() && of(hog, "Requeued").is_empty(), "not a GPU OOM");
}

/// A job with `-c 1` that prints, for each of its cgroups that has a CPU quota file, the file,
/// its cgroup and the quota (`cpu.cfs_quota_us` on cgroup v1, `cpu.max` on v2).
const CPU_QUOTA_SCRIPT: &str = r#"#!/usr/bin/env python3
#SBATCH -c 1
#SBATCH --gres=gpu:1
#SBATCH --time=2
#SBATCH -o quota-%j.out
mounts = [line.split(' - ') for line in open('/proc/self/mountinfo')]
for line in open('/proc/self/cgroup'):
    _, controllers, path = line.rstrip('\n').split(':', 2)
    for head, tail in mounts:
        kind, _, options = tail.split()[:3]
        v1 = kind == 'cgroup' and 'cpu' in controllers.split(',') and 'cpu' in options.split(',')
        v2 = kind == 'cgroup2' and controllers == ''
        name = 'cpu.cfs_quota_us' if v1 else 'cpu.max'
        try:
            if v1 or v2:
                print(name, path, open(head.split()[4] + path + '/' + name).read().strip())
        except OSError:
            pass
"#;

/// Goal: the dry run and `show` say of each host limit its value, what set it and whether
/// this queue enforces it, in exact words ("not enforced here (why)" where it cannot).
#[test]
fn the_dry_run_and_show_say_whether_host_limits_hold_here() {
    let home = home();
    let file = corpus().join("08_wiki_single_gpu_mail.sh");
    let out = home.cmd().current_dir(home.path()).args(["submit", "--dry-run"]).arg(&file).output().unwrap();
    let text = stdout(&out);
    let held = |controller: &str| {
        unenforced(controller).map_or(carma::exec::hostlimit::enforced_words(controller), |why| {
            format!("not enforced here ({why})")
        })
    };
    let shown = file.display();
    let memory = format!("\nhost memory: 8192 MiB ({shown}:6 #SBATCH --mem=8G); {}\n", held("memory"));
    assert!(text.contains(&memory), "{text}");
    let cpus = format!("\nCPUs: 2 ({shown}:5 #SBATCH --cpus-per-task=2); {}\n", held("cpu"));
    assert!(text.contains(&cpus), "{text}");
    assert!(text.contains("\nrequeue: the queue's default (default)\n"), "{text}");
    let plain = home.ok(&["submit", "--dry-run", "--", "true"]);
    assert!(plain.contains("\nhost memory: no limit (default)\nCPUs: no limit (default)\n"), "{plain}");

    let id = home.ok(&["submit", "--parsable", "--host-mem", "2G", "-c", "2", "--no-requeue", "--", "true"]);
    home.ok(&["tick"]);
    let show = home.ok(&["show", id.trim()]);
    assert!(show.contains(&format!("\nhost memory 2 GiB; {}\n", held("memory"))), "{show}");
    assert!(show.contains(&format!("\ncpus        2; {}\n", held("cpu"))), "{show}");
    assert!(show.contains("\nrequeue     never (--no-requeue)\n"), "{show}");
}

/// The tryout of issue 42: ten more scripts, srun inside them, options on the command line.
#[path = "sbatch_corpus/tryout.rs"]
mod tryout;
