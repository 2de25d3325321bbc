//! Two real users on one root-owned queue: fair share, and who may hold, release and update.
//!
//! Needs root with `useradd`, `userdel` and `runuser` (CI runs as root); elsewhere each test
//! prints that it was skipped and how to run it.

mod common;

use std::time::Duration;

use common::users::{SharedQueue, ThrowawayUser, skip_without_users};
use serde_json::Value;

fn by_id<'a>(queue: &'a Value, id: &str) -> &'a Value {
    queue["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).unwrap()
}

/// Goal: one user's 30 queued tasks do not push another user's single task behind all of
/// them. Method: alice submits 30 tasks that each need a whole GPU; after the first tick
/// places two of them, bob submits one; it must start while most of alice's still wait
/// (under plain FIFO it would start after all 30).
#[test]
fn fair_share_starts_a_light_users_task_before_a_heavy_users_backlog() {
    if skip_without_users() {
        return;
    }
    let lab = SharedQueue::new();
    let (alice, bob) = (ThrowawayUser::create("fsa"), ThrowawayUser::create("fsb"));
    let burst = [
        "submit",
        "--parsable",
        "--array",
        "0-29",
        "--name",
        "burst",
        "--mem",
        "38GiB",
        "--",
        "sleep",
        "0.3",
    ];
    let array = lab.ok_as(&alice, &burst).trim().to_string();
    lab.home.ok(&["tick"]);
    let single = ["submit", "--parsable", "--name", "single", "--mem", "38GiB", "--", "sh", "-c", "id -u"];
    let single = lab.ok_as(&bob, &single).trim().to_string();
    let mut waiting_when_bob_started = None;
    for _ in 0..200 {
        lab.home.ok(&["tick"]);
        let queue = lab.queue();
        if by_id(&queue, &single)["state"] != "Pending" && waiting_when_bob_started.is_none() {
            let tasks = queue["tasks"].as_array().unwrap();
            let waiting = tasks
                .iter()
                .filter(|t| t["workflow"]["array_id"] == array.as_str() && t["state"] == "Pending");
            waiting_when_bob_started = Some(waiting.count());
        }
        let done = queue["tasks"].as_array().unwrap().iter().all(|t| t["state"] == "Finished");
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let waiting = waiting_when_bob_started.expect("bob's task started");
    assert!(waiting >= 24, "bob's task started with only {waiting} of alice's 30 still waiting");
    let log = std::fs::read_to_string(lab.home.path().join(format!("runs/{single}/1/stdout.log"))).unwrap();
    assert_eq!(log.trim(), bob.uid.to_string(), "bob's task ran as bob");
    assert_eq!(by_id(&lab.queue(), &single)["submitter_uid"], bob.uid);
}

/// Goal: hold, release and update are the submitter's and root's; another user is refused at
/// once (exit 77), the owner's requests are applied by the next tick, an ordinary user keeps
/// to the priority cap, and a notice runs as the submitter.
#[test]
fn only_the_submitter_or_root_holds_releases_and_updates() {
    if skip_without_users() {
        return;
    }
    let lab = SharedQueue::new();
    let (alice, bob) = (ThrowawayUser::create("hra"), ThrowawayUser::create("hrb"));
    let marker = std::env::temp_dir().join(format!("carma-notice-{}", std::process::id()));
    let notify = format!("sh -c 'id -u > {}'", marker.display());
    let submit = ["submit", "--parsable", "--hold", "--name", "a", "--notify", &notify, "--", "true"];
    let a = lab.ok_as(&alice, &submit).trim().to_string();
    lab.home.ok(&["tick"]);
    for verb in ["hold", "release", "update"] {
        let mut args = vec![verb, a.as_str()];
        if verb == "update" {
            args.extend(["--nice", "1"]);
        }
        let out = lab.as_user(&bob, &args);
        let action = format!("{verb} it");
        common::assert_error(
            &out,
            77,
            &format!(
                "cannot {verb} task {a} (a): it belongs to {}; only its submitter or root may {action}",
                alice.name
            ),
        );
    }
    let out = lab.as_user(&alice, &["update", &a, "--priority", "5"]);
    common::assert_error(
        &out,
        2,
        "priority 5 is above what users may set on this queue (0); use --priority 0 or less, or ask the administrator",
    );
    let out = lab.as_user(&alice, &["submit", "--priority", "1", "--", "true"]);
    common::assert_error(
        &out,
        2,
        "command line: priority 1 is above what users may set on this queue (0); use --priority 0 or less, or ask the administrator",
    );
    assert_eq!(
        lab.ok_as(&alice, &["update", &a, "--nice", "3"]),
        format!("update of task {a} (a) requested; the next tick applies it\n")
    );
    assert_eq!(
        lab.ok_as(&alice, &["release", &a]),
        format!("release of task {a} (a) requested; the next tick applies it\n")
    );
    // A task of alice's that no tick has taken in yet is not bob's to depend on.
    let spooled = lab.ok_as(&alice, &["submit", "--parsable", "--", "true"]).trim().to_string();
    let out = lab.as_user(&bob, &["submit", "--after", &spooled, "--", "true"]);
    common::assert_error(
        &out,
        2,
        &format!(
            "dependency {spooled}: task {spooled} is another user's submission that no tick has taken in yet; you can name it once `carma queue` shows it"
        ),
    );
    lab.home.tick_until_done(Duration::from_secs(30));
    let events = lab.home.task_events(&a);
    let updated = events.iter().find(|e| e["kind"] == "Updated").expect("the update was applied");
    assert_eq!(updated["data"]["by_uid"], alice.uid);
    assert_eq!(updated["data"]["nice"], 3);
    let released = events.iter().find(|e| e["kind"] == "Released").expect("the release was applied");
    assert_eq!(released["data"]["by_uid"], alice.uid);
    for _ in 0..50 {
        if std::fs::read_to_string(&marker).is_ok_and(|t| t.ends_with('\n')) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let notice_uid = std::fs::read_to_string(&marker).expect("the notice ran");
    let _ = std::fs::remove_file(&marker);
    assert_eq!(notice_uid.trim(), alice.uid.to_string(), "the notice ran as the submitter");
    // Bob may depend on alice's task once it is in the queue.
    lab.ok_as(&bob, &["submit", "--after", &format!("afterany:{a}"), "--", "true"]);
}
