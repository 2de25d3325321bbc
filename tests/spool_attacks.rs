//! Nothing a user leaves in the spool, or names as a model summary, can stall, abort or
//! silently starve the tick (issue 13, items 1-4 and 9).
//!
//! Each test plays attacker and victim: the attacker plants something; the victim submits an
//! ordinary task; one tick later the victim's task is placed and the attacker's entry is
//! rejected with a record that names the attacker, and moved out of the spool. As root the
//! attacker is a throw-away user (so the owner in the record is checked); otherwise both are
//! this user. Every tick runs under a timeout: a tick that blocks fails the test, it does not
//! hang it.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::cluster::TWO_A100;
use common::users::{ThrowawayUser, can_create_users};
use common::{TestHome, stderr};

/// The attacker: a throw-away user as root, else this user.
struct Attacker {
    user: Option<ThrowawayUser>,
}

impl Attacker {
    fn new() -> Attacker {
        Attacker { user: can_create_users().then(|| ThrowawayUser::create("x")) }
    }

    fn uid(&self) -> u32 {
        // SAFETY: geteuid cannot fail.
        self.user.as_ref().map_or_else(|| unsafe { libc::geteuid() }, |u| u.uid)
    }

    /// Runs `program args` as the attacker.
    fn run(&self, program: &str, args: &[&str]) {
        let out = match &self.user {
            Some(user) => user.run(program, args, &[], Path::new("/")),
            None => Command::new(program).args(args).output().unwrap(),
        };
        assert!(out.status.success(), "{program} {args:?}: {}", stderr(&out));
    }
}

/// A queue the attacker may write into (a system queue's spool is sticky and open to all).
fn lab() -> TestHome {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    home
}

/// One tick, which must end within 20 s.
fn tick_within(home: &TestHome) -> std::process::Output {
    home.tick_within(Duration::from_secs(20)).0
}

/// The victim's task was placed by that one tick.
fn assert_placed(home: &TestHome, id: &str) {
    let kinds: Vec<String> =
        home.task_events(id).iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect();
    assert!(kinds.contains(&"Placed".to_string()), "the victim's task was not placed in one tick: {kinds:?}");
}

/// The Rejected records naming `file`, with the owner they name.
fn rejections(home: &TestHome, file: &str) -> Vec<u64> {
    home.events()
        .into_iter()
        .filter(|e| e["kind"] == "Rejected" && e["data"]["spool_file"] == file)
        .map(|e| e["data"]["submitter_uid"].as_u64().unwrap())
        .collect()
}

fn victim(home: &TestHome) -> String {
    home.ok(&["submit", "--parsable", "--mem", "1GiB", "--", "sleep", "5"]).trim().to_string()
}

#[test]
fn a_fifo_or_a_device_as_model_summary_is_refused_at_submit() {
    let home = lab();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("sum.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let hint = "give a summary JSON, torchsummary text or module dump (schema/model-summary.schema.json), or drop model_summary";
    let started = Instant::now();
    let out =
        home.run(&["submit", "--model-summary", fifo.to_str().unwrap(), "--batch-size", "8", "--", "true"]);
    common::assert_error(
        &out,
        2,
        &format!("model summary {}: a FIFO, not a regular file; {hint}", fifo.display()),
    );
    let out = home.run(&["submit", "--model-summary", "/dev/zero", "--batch-size", "8", "--", "true"]);
    common::assert_error(&out, 2, &format!("model summary /dev/zero: a device, not a regular file; {hint}"));
    assert!(started.elapsed() < Duration::from_secs(5), "submit blocked on the FIFO");
}

#[test]
fn a_spool_file_naming_a_fifo_never_makes_the_tick_open_it() {
    // A hand-written spool file: a summary path and no summary text, as carma 0.1 wrote.
    let home = lab();
    let attacker = Attacker::new();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let fifo = dir.path().join("sum.json");
    attacker.run("mkfifo", &[fifo.to_str().unwrap()]);
    let id = carma::id::TaskId::generate(carma::clock::Clock::now_ms(&carma::clock::SystemClock));
    let spec = format!(
        "name = \"evil\"\ncommand = [\"true\"]\nworkdir = \"/\"\nmodel_summary = \"{}\"\nbatch_size = 8\n",
        fifo.display()
    );
    let staged = dir.path().join("staged.toml");
    std::fs::write(&staged, spec).unwrap();
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o644)).unwrap();
    let target = attacker_folder(&home, &attacker).join(format!("{id}.toml"));
    attacker.run("install", &["-m", "600", staged.to_str().unwrap(), target.to_str().unwrap()]);
    let victim = victim(&home);
    let out = tick_within(&home);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_placed(&home, &victim);
    let failed: Vec<_> =
        home.task_events(id.as_str()).into_iter().filter(|e| e["kind"] == "EstimateFailed").collect();
    assert_eq!(failed.len(), 1, "the summary is not read, and the task says so once");
    assert!(failed[0]["data"]["reason"].as_str().unwrap().contains("not captured at submit"));
}

/// The attacker's own spool folder (`spool/<uid>/`), made by the attacker as submit makes it.
fn attacker_folder(home: &TestHome, attacker: &Attacker) -> std::path::PathBuf {
    let folder = home.spool_top().join(attacker.uid().to_string());
    if !folder.exists() {
        attacker.run("mkdir", &["-m", "700", folder.to_str().unwrap()]);
    }
    folder
}

#[test]
fn odd_spool_entries_are_rejected_with_their_owner_and_moved_away() {
    let home = lab();
    let attacker = Attacker::new();
    let spool = attacker_folder(&home, &attacker);
    let name =
        |kind: &str| format!("{}.toml", carma::id::TaskId::from_parts(1_700_000_000_000, kind.len() as u32));
    let (dir, fifo, link) = (name("d"), name("ff"), name("lll"));
    attacker.run("mkdir", &[spool.join(&dir).to_str().unwrap()]);
    attacker.run("mkfifo", &[spool.join(&fifo).to_str().unwrap()]);
    attacker.run("ln", &["-s", "/etc/shadow", spool.join(&link).to_str().unwrap()]);
    // A socket too: Python binds one in the spool as the attacker.
    let socket = "0000-socket.toml";
    let bind = format!(
        "import socket; s = socket.socket(socket.AF_UNIX); s.bind('{}')",
        spool.join(socket).display()
    );
    attacker.run("python3", &["-c", &bind]);
    let victim = victim(&home);
    let out = tick_within(&home);
    assert!(out.status.success(), "one bad entry aborted the tick: {}", stderr(&out));
    assert_placed(&home, &victim);
    for (entry, why) in [
        (&dir, "is a directory"),
        (&fifo, "is a FIFO"),
        (&link, "is a symbolic link"),
        (&socket.to_string(), "is not named <task-id>.toml"),
    ] {
        assert_eq!(rejections(&home, entry), [u64::from(attacker.uid())], "{entry} is charged to its owner");
        assert!(
            !spool.join(entry).exists() && std::fs::symlink_metadata(spool.join(entry)).is_err(),
            "{entry} is still in the spool"
        );
        let reason = home
            .events()
            .into_iter()
            .find(|e| e["kind"] == "Rejected" && e["data"]["spool_file"] == entry.as_str())
            .unwrap()["data"]["reason"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(reason.contains(why), "{entry}: {reason}");
    }
    // The FIFO, the link and the socket stay in quarantine for an administrator to see; the
    // directory went at once, in the clean that follows the tick's refusals (a parked directory
    // is never kept: it could hold anything).
    let quarantined = std::fs::read_dir(home.path().join("quarantine")).unwrap().count();
    assert_eq!(quarantined, 3);
    // The next tick has nothing left to refuse.
    tick_within(&home);
    assert_eq!(rejections(&home, &dir).len(), 1);
}

#[test]
fn ten_thousand_hard_links_do_not_hide_a_submission() {
    let home = lab();
    let attacker = Attacker::new();
    let script = format!(
        "f={spool}/.base; printf 'x' > $f; i=0; while [ $i -lt 10000 ]; do ln $f {spool}/0000-$i.toml; i=$((i+1)); done",
        spool = attacker_folder(&home, &attacker).display()
    );
    attacker.run("sh", &["-c", &script]);
    let victim = victim(&home);
    let out = tick_within(&home);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_placed(&home, &victim);
    // The junk is refused in bounded batches, the journal gets a bounded number of records
    // and says that more waits.
    let deferred = home.events().into_iter().filter(|e| e["kind"] == "IngestDeferred").count();
    assert_eq!(deferred, 1);
    let rejected = home.events().into_iter().filter(|e| e["kind"] == "Rejected").count();
    assert_eq!(rejected, carma::intake::BOUNDS.refusals_per_user + 1, "the bound, then one summary");
}
