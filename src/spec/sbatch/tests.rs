use super::*;

fn server(gpus: &[&str]) -> Server {
    Server {
        gpus: Some(gpus.iter().map(|g| g.to_string()).collect()),
        node: "gpu01".into(),
        sends_mail: true,
        mails_submitter: false,
        host_limits_unenforced: None,
        cpu_limit_unenforced: None,
    }
}

fn carma_words(t: &Translation) -> Vec<String> {
    t.carma.iter().map(|c| format!("{}: {}", c.written, c.words.join(" "))).collect()
}

/// Goal: sbatch's line rules: directives before the first command only, trailing comments,
/// `--opt=value`, `--opt value`, `-tvalue`, `-t value`.
#[test]
fn directives_are_read_with_sbatchs_rules() {
    let text = "#!/bin/bash\n#SBATCH --job-name=train   # the name\n\n# plain comment\n#SBATCH -t 48:00:00\n#SBATCH -G2 --array 0-3%2\n#SBATCHX --no\nmodule load cuda\n#SBATCH --gres=gpu:8\n";
    let t = translate(text, &server(&["NVIDIA A100-SXM4-80GB"; 4]));
    assert_eq!(
        carma_words(&t),
        [
            "--job-name=train: --name train",
            "-t 48:00:00: --time-limit 2d",
            "-G2: --gpus 2",
            "--array 0-3%2: --array 0-3%2"
        ]
    );
    assert_eq!(t.carma[1].line, 5);
    assert!(t.notes.is_empty() && t.refusals.is_empty(), "{t:?}");
    assert!(has_directives(text));
    assert!(!has_directives("#!/bin/sh\necho\n#SBATCH -t 5\n"));
}

/// Goal: every Slurm time form, a bare number being minutes.
#[test]
fn every_slurm_time_form() {
    let cases = [
        ("15", Some(900_000)),
        ("15:30", Some(930_000)),
        ("48:00:00", Some(172_800_000)),
        ("0-12:00:00", Some(43_200_000)),
        ("14-0", Some(14 * 86_400_000)),
        ("1-2", Some(93_600_000)),
        ("1-2:30", Some(95_400_000)),
        ("2-00:00:05", Some(172_805_000)),
        ("UNLIMITED", None),
        ("infinite", None),
        ("0", None),
    ];
    for (text, ms) in cases {
        assert_eq!(slurm_time_ms(text), Ok(ms), "{text}");
    }
    assert_eq!(
        slurm_time_ms("2h"),
        Err("time \"2h\" is not a Slurm time; use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS".into())
    );
    assert_eq!(render_duration(95_400_000), "1d 2h 30m");
}

/// Goal: memory as Slurm reads it: either case, B or iB, bare MiB, 0 meaning all.
#[test]
fn memory_as_slurm_reads_it() {
    for (text, mib) in [
        ("16g", 16384),
        ("16G", 16384),
        ("16GB", 16384),
        ("16GiB", 16384),
        ("500", 500),
        ("2048K", 2),
        ("1T", 1_048_576),
        ("0", 0),
    ] {
        assert_eq!(slurm_memory_mib(text), Ok(mib), "{text}");
    }
    assert!(slurm_memory_mib("12Q").unwrap_err().contains("unknown unit"));
    assert!(slurm_memory_mib("999999999999T").unwrap_err().contains("too large"), "no overflow");
}

/// Goal: output patterns with Slurm's meanings.
#[test]
fn output_patterns_take_slurms_meanings() {
    assert_eq!(
        output_template("logs/%x_%A_%a.out", "gpu01"),
        Ok(("logs/%x_{array}_{index}.out".into(), None))
    );
    assert_eq!(output_template("%N-%j-%u.%%", "gpu01"), Ok(("gpu01-%j-%u.%%".into(), None)));
    assert_eq!(
        output_template("r_%4a.log", "n"),
        Ok(("r_{index}.log".into(), Some("zero-padding (%4) is not applied".into())))
    );
    assert!(output_template("%q", "n").unwrap_err().starts_with("%q is not a Slurm file pattern"));
}

/// Goal: the GPU forms; a type or count this server lacks is refused with the reason.
#[test]
fn gpu_forms_and_what_this_server_has() {
    let text = "#!/bin/sh\n#SBATCH --gres=gpu:a100:2\n#SBATCH --gpus=a100:1\n#SBATCH --gpus-per-node=3\n#SBATCH --gpus-per-task=1 --ntasks=2\n#SBATCH --gres=gpu:v100:1\n#SBATCH --gpus 9\n";
    let t = translate(text, &server(&["NVIDIA A100-SXM4-80GB"; 4]));
    let words: Vec<String> = t.carma.iter().map(|c| c.words.join(" ")).collect();
    assert_eq!(
        words,
        ["--gpus 2", "--gpus 1", "--gpus 3", "--gpus 2 --env SLURM_GPUS_PER_TASK=1", "--env SLURM_NTASKS=2"]
    );
    let refusals: Vec<String> = t.refusals.iter().map(|f| f.render("t.sh")).collect();
    assert_eq!(
        refusals,
        [
            "t.sh:7: #SBATCH --gpus 9: 9 GPUs: this server has 4; ask for at most --gpus 4 (on the command line it wins over this line)"
        ],
        "only the last GPU option counts, as in sbatch"
    );
    let notes: Vec<String> = t.notes.iter().map(|f| f.render("t.sh")).collect();
    assert_eq!(
        notes,
        [
            "t.sh:5: #SBATCH --gpus-per-task=1: 1 per task × 2 tasks on one node",
            "t.sh:6: #SBATCH --gres=gpu:v100:1: this server has no v100 GPU (it has NVIDIA A100-SXM4-80GB); drop the type (--gres=gpu:1), or give --gpus N on the command line, which wins; overridden by line 7's --gpus 9",
        ]
    );
    assert!(type_matches("a100_80gb", "NVIDIA A100-SXM4-80GB"));
    assert!(!type_matches("a100_40gb", "NVIDIA A100-SXM4-80GB"));
}

/// Goal: cluster-only options are noted, impossible ones refused, unknown ones (an
/// ambiguous prefix, as getopt reads it, too) get a Slurm suggestion; all in one reading.
#[test]
fn every_problem_in_one_reading() {
    let text = "#!/bin/sh\n#SBATCH -p gpu -A lab --qos=normal\n#SBATCH -N 2\n#SBATCH --node=1\n#SBATCH --wrap 'x'\n#SBATCH --model-summary x\n#SBATCH -J 'my job' -t 400-0\n";
    let t = translate(text, &Server::default());
    let notes: Vec<String> = t.notes.iter().map(|f| f.render("s")).collect();
    assert_eq!(
        notes,
        [
            "s:2: #SBATCH -p gpu: partitions: only matter on a cluster; ignored",
            "s:2: #SBATCH -A lab: accounts: only matter on a cluster; ignored",
            "s:2: #SBATCH --qos=normal: QOS: only matters on a cluster; ignored",
        ]
    );
    let refusals: Vec<String> = t.refusals.iter().map(|f| f.render("s")).collect();
    assert_eq!(
        refusals,
        [
            "s:3: #SBATCH -N 2: 2 nodes: this server is one node; ask for the GPUs one node has with --gpus N",
            "s:4: #SBATCH --node=1: --node is ambiguous (--nodefile, --nodelist, --nodes); write more of it, as sbatch asks",
            "s:5: #SBATCH --wrap x: a script brings its own command; drop --wrap",
            "s:6: #SBATCH --model-summary: --model-summary is not an sbatch option; the README's \"Slurm users\" table lists them",
            "s:6: #SBATCH x: not an option; #SBATCH lines take options only",
            "s:7: #SBATCH -t 400-0: 400d is longer than carma's limit of a year",
        ]
    );
}

/// Goal: sbatch's command line after the script's lines: its options win (what this server
/// cannot give for a setting set again is a note naming who set it), a layer above wins over
/// both, a node count implied by `--ntasks` over `--ntasks-per-node` is refused, and a name
/// with spaces and `*` is taken.
#[test]
fn the_command_line_and_later_lines_win_and_implied_nodes_are_refused() {
    let text = "#!/bin/sh\n#SBATCH --gres=gpu:v100:2 -J 'my job *'\n#SBATCH -n 8 --ntasks-per-node=4\n";
    let a100 = server(&["NVIDIA A100-SXM4-80GB"; 4]);
    let t = translate_with(text, &a100, &["--gpus=2".into(), "--ntasks".into(), "4".into()], &[]);
    assert!(t.refusals.is_empty(), "{:?}", t.refusals);
    assert!(t.notes[0].text.ends_with("; overridden by the command line's --gpus=2"), "{:?}", t.notes);
    assert_eq!(t.carma[0].words, ["--name", "my job *"]);
    let last = t.carma.last().unwrap();
    assert_eq!((last.line, last.written.as_str()), (COMMAND_LINE, "--ntasks 4"));
    assert_eq!(last.words, ["--env", "SLURM_NTASKS=4"]);
    let t = translate_with(text, &a100, &[], &[("--gpus", "the command line's --gpus 2".into())]);
    let refusals: Vec<String> = t.refusals.iter().map(|f| f.render("s")).collect();
    assert_eq!(
        refusals,
        [
            "s:3: #SBATCH -n 8: 8 tasks at 4 per node (--ntasks-per-node=4) is 2 nodes: this server is one node; ask for at most 4 tasks"
        ]
    );
    assert!(t.notes[0].text.ends_with("; overridden by the command line's --gpus 2"), "{:?}", t.notes);
    let t = translate_with("#!/bin/sh\n", &a100, &["--nodes=2".into(), "-p".into(), "gpu".into()], &[]);
    assert_eq!(
        t.refusals[0].render("x"),
        "command line: --nodes=2: 2 nodes: this server is one node; ask for the GPUs one node has with --gpus N"
    );
    assert_eq!(t.notes[0].render("x"), "command line: -p gpu: partitions: only matter on a cluster; ignored");
    assert_eq!(
        super::super::validate_name("a/b").unwrap_err(),
        "name \"a/b\" is invalid; use 1-128 characters, no control character or /"
    );
}

/// Goal: the sbatch table of docs/slurm-users.md is this table, row for row.
#[test]
fn the_guides_table_is_the_codes_table() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/slurm-users.md")).unwrap();
    let begin = "<!-- sbatch options: generated from src/spec/sbatch/table.rs -->\n";
    let start = page.find(begin).expect("docs/slurm-users.md has the sbatch table's marker") + begin.len();
    let end = page[start..].find("\n\n").map_or(page.len(), |e| start + e + 1);
    let expected = markdown();
    assert!(page[start..end] == expected, "docs/slurm-users.md's table differs; it should be:\n{expected}");
}

/// Goal: mail options are carma's where this queue mails, a note where it cannot (a Slurm
/// script is not refused for its mail); types add up over lines, as in sbatch.
#[test]
fn mail_is_honoured_where_the_queue_mails() {
    let text = "#!/bin/sh\n#SBATCH --mail-type=begin\n#SBATCH --mail-type=end\n#SBATCH --mail-user=a@b.c\n";
    let t = translate(text, &server(&[]));
    assert_eq!(carma_words(&t)[1], "--mail-type=end: --mail-type begin,end");
    let quiet = Server { sends_mail: false, ..server(&[]) };
    let t = translate(text, &quiet);
    assert!(t.carma.iter().all(|c| c.words.is_empty()));
    assert_eq!(
        t.notes[2].render("s"),
        "s:4: #SBATCH --mail-user=a@b.c: this queue sends no mail (its administrator set no sendmail); ignored"
    );
    let t = translate("#!/bin/sh\n#SBATCH --mail-type=END\n", &server(&[]));
    assert_eq!(
        t.notes[0].render("s"),
        "s:2: #SBATCH --mail-type=END: no one to mail: add --mail-user ADDRESS (this queue mails no submitter by default); ignored"
    );
}

/// Goal: `--mem`, `--mem-per-cpu` (× `-c` × `-n`, whatever the lines' order) and `-c` (× `-n`)
/// become carma's host limits; `--mem=0` is no limit; `--requeue`/`--no-requeue` become
/// carma's own. Where the queue cannot enforce them, each says so in its note.
#[test]
fn host_memory_cpus_and_requeue_become_carma_words() {
    let text = "#!/bin/sh\n#SBATCH --mem-per-cpu=1G\n#SBATCH -n 2\n#SBATCH -c 3\n#SBATCH --mem=16g\n#SBATCH --mem=0\n#SBATCH --requeue\n#SBATCH --no-requeue\n";
    let t = translate(text, &server(&[]));
    assert_eq!(
        carma_words(&t),
        [
            "--mem-per-cpu=1G: --env SLURM_MEM_PER_CPU=1024 --host-mem 6144MiB",
            "-n 2: --env SLURM_NTASKS=2",
            "-c 3: --cpus-per-task 6",
            "--mem=16g: --host-mem 16384MiB",
            "--mem=0: ",
            "--requeue: --requeue",
            "--no-requeue: --no-requeue",
        ]
    );
    let notes: Vec<String> = t.notes.iter().map(|n| format!("{}: {}", n.line, n.text)).collect();
    assert_eq!(
        notes,
        [
            "2: 1024 MiB per CPU × 6 CPU(s)",
            "4: 3 CPUs per task × 2 tasks on one node",
            "6: 0 asks for all of the node's memory: no host memory limit",
        ]
    );
    let why = "a personal queue: its tick does not run as root, and only root sets a job's cgroup";
    let here = Server {
        host_limits_unenforced: Some(why.into()),
        cpu_limit_unenforced: Some(why.into()),
        ..server(&[])
    };
    let t = translate("#!/bin/sh\n#SBATCH --mem=2G\n#SBATCH -c 4\n", &here);
    let notes: Vec<&str> = t.notes.iter().map(|n| n.text.as_str()).collect();
    assert_eq!(
        notes,
        [
            format!("host memory 2048 MiB: not enforced here ({why})"),
            format!("4 CPU(s): not enforced here ({why})"),
        ]
    );
}
