//! Administrators' GPU reservations (`carma reserve`) on a real tick with fake GPUs.
//!
//! Goal: a long task of another user stays off reserved GPUs; a short one with a time limit
//! that ends before the start backfills onto them; the reservation's user runs in it at its
//! start, on its GPUs; an impossible reservation is refused with its reason and exit 2; a
//! non-administrator's create is refused with exit 77.
//! Method: a root-owned queue on two fake A100s (`SharedQueue`), throw-away users made with
//! `useradd` submitting through the spool, root's tick run by hand as the timer would. The
//! tests that need a second user skip (with a message) unless run as root with useradd.

mod common;

use std::time::{Duration, Instant};

use common::users::{SharedQueue, ThrowawayUser, skip_without_users};
use common::{TestHome, assert_error, stdout};
use serde_json::Value;

/// The task's row in `carma queue --all --json`.
fn row(queue: &SharedQueue, id: &str) -> Value {
    let all = queue.queue();
    let found = all["tasks"].as_array().unwrap().iter().find(|t| t["id"] == id).cloned();
    found.unwrap_or_else(|| panic!("{id} not in the queue: {all:#}"))
}

/// The task's GPUs, from `carma show --json`.
fn gpus_of(queue: &SharedQueue, id: &str) -> Value {
    let shown: Value = serde_json::from_str(&queue.home.ok(&["show", id, "--json"])).unwrap();
    shown["task"]["attempts"][0]["gpus"].clone()
}

fn submit(queue: &SharedQueue, user: &ThrowawayUser, args: &[&str]) -> String {
    let mut all = vec!["submit", "--parsable"];
    all.extend_from_slice(args);
    queue.ok_as(user, &all).trim().to_string()
}

/// `carma reserve create` as root: GPU `gpu`, for `users`, from `start` for `duration`.
fn reserve(queue: &SharedQueue, gpu: &str, start: &str, duration: &str, users: &str) {
    let args = [
        "reserve",
        "create",
        "--name",
        "paper",
        "--gpu",
        gpu,
        "--start",
        start,
        "--duration",
        duration,
        "--users",
        users,
    ];
    queue.home.ok(&args);
}

#[test]
fn a_long_task_of_another_user_stays_off_and_a_short_one_backfills() {
    if skip_without_users() {
        return;
    }
    let queue = SharedQueue::new();
    queue.home.ok(&["tick"]);
    let alice = ThrowawayUser::create("ra");
    let bob = ThrowawayUser::create("rb");
    reserve(&queue, "0", "now+1hour", "2h", &alice.name);

    // Bob's task without a time limit would still run at the start: kept off GPU0.
    // The two-GPU task comes first: it cannot start before the window ends, so it keeps no
    // GPU for itself and the one-GPU task behind it runs.
    let both = submit(&queue, &bob, &["--gpus", "2", "--", "sleep", "60"]);
    let one = submit(&queue, &bob, &["--", "sleep", "60"]);
    queue.home.ok(&["tick"]);
    let waiting = row(&queue, &both);
    assert_eq!(waiting["state"], "Pending", "{waiting:#}");
    let reason = waiting["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("needs 2 GPUs, 1 pass (GPU1); Reservation: GPU0 held for \"paper\" from "),
        "{reason}"
    );
    assert_eq!(gpus_of(&queue, &one), serde_json::json!(["GPU-fake-0001"]), "the long task went to GPU1");
    queue.home.ok(&["cancel", &both, &one]);
    queue.home.ok(&["tick"]);

    // A two-GPU task whose limit ends before the start may use GPU0 meanwhile.
    let short = submit(&queue, &bob, &["--gpus", "2", "--time", "30m", "--", "sleep", "60"]);
    queue.home.ok(&["tick"]);
    assert_eq!(gpus_of(&queue, &short), serde_json::json!(["GPU-fake-0000", "GPU-fake-0001"]));
    queue.home.ok(&["cancel", &short]);
    queue.home.ok(&["tick"]);
}

#[test]
fn a_non_administrator_cannot_create_or_delete_a_reservation() {
    if skip_without_users() {
        return;
    }
    let queue = SharedQueue::new();
    queue.home.ok(&["tick"]);
    let bob = ThrowawayUser::create("rn");
    let args = ["reserve", "create", "--name", "mine", "--gpus", "1", "--start", "now", "--duration", "1h"];
    let mut args = args.to_vec();
    args.extend(["--users", &bob.name]);
    let out = queue.as_user(&bob, &args);
    assert_error(
        &out,
        77,
        "cannot create reservation \"mine\": only root or the queue's administrators may reserve GPUs",
    );
    reserve(&queue, "1", "now+1hour", "1h", &bob.name);
    let out = queue.as_user(&bob, &["reserve", "delete", "paper"]);
    assert_error(
        &out,
        77,
        "cannot delete reservation \"paper\": only root or the queue's administrators may reserve GPUs",
    );
    // Everyone reads the list.
    let list = queue.ok_as(&bob, &["reserve", "list"]);
    assert!(list.lines().nth(1).is_some_and(|l| l.starts_with("paper ")), "{list}");
}

/// Needs no second user: the queue's owner is its administrator.
#[test]
fn an_impossible_reservation_is_refused_with_its_reason() {
    let home = TestHome::with_fake_gpus(common::cluster::TWO_A100, "magm");
    let create = |extra: &[&str]| {
        let mut args = vec!["reserve", "create", "--name", "big", "--start", "now+1hour", "--duration", "2d"];
        args.extend_from_slice(extra);
        args.extend(["--users", "root"]);
        home.run(&args)
    };
    // Before any tick carma knows no GPU to reserve.
    assert_error(
        &create(&["--gpus", "1"]),
        2,
        "no GPUs known yet, so nothing can be reserved; run a tick first (carma tick) and see carma gpus",
    );
    home.ok(&["tick"]);
    assert_error(
        &create(&["--gpus", "3"]),
        2,
        "reservation \"big\" holds 3 GPUs, this machine has 2; ask for at most 2",
    );
    assert_error(
        &create(&["--gpu", "0,5"]),
        2,
        "reservation \"big\" names GPU5, which this machine does not have (it has 2); see carma gpus",
    );
    home.ok(&[
        "reserve",
        "create",
        "--name",
        "paper",
        "--gpus",
        "2",
        "--start",
        "now+1hour",
        "--duration",
        "1d",
        "--users",
        "root",
    ]);
    assert_error(
        &create(&["--gpus", "1"]),
        2,
        "reservation \"big\" holds 1 GPUs, and \"paper\" hold 2 in the same window; this machine has 2",
    );
    assert_error(
        &home.run(&["reserve", "delete", "nope"]),
        2,
        "no reservation \"nope\"; carma reserve list shows them",
    );
    let deleted = home.ok(&["reserve", "delete", "paper"]);
    assert_eq!(deleted, "reservation \"paper\" deleted; tasks that name it stay queued\n");
    assert_eq!(
        home.ok(&["reserve", "list"]),
        "no reservations (an administrator creates one with carma reserve create)\n"
    );
}

/// Goal: the reservation's user waits for the window with a reason, then runs in it at its
/// start, on its GPU, though another GPU is idle.
#[test]
fn the_reservations_user_runs_in_it_at_its_start() {
    if skip_without_users() {
        return;
    }
    let queue = SharedQueue::new();
    queue.home.ok(&["tick"]);
    let alice = ThrowawayUser::create("rs");
    reserve(&queue, "1", "now+3s", "1h", &alice.name);
    let id = submit(&queue, &alice, &["--reservation", "paper", "--", "sleep", "60"]);
    queue.home.ok(&["tick"]);
    let waiting = row(&queue, &id);
    let reason = waiting["reason"].as_str().unwrap();
    assert!(reason.starts_with("Reservation: waits for \"paper\" from "), "{waiting:#}");
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        queue.home.ok(&["tick"]);
        if row(&queue, &id)["state"] != "Pending" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never placed: {:#}", row(&queue, &id));
    }
    assert_eq!(gpus_of(&queue, &id), serde_json::json!(["GPU-fake-0001"]), "placed on the reservation's GPU");
    let shown = stdout(&queue.home.run(&["show", &id]));
    assert!(shown.lines().any(|l| l == "reservation paper"), "{shown}");
    queue.home.ok(&["cancel", &id]);
    queue.home.ok(&["tick"]);
}

/// Goal: the simulator honours a reservation as the real tick does: inside the window no
/// task outside it runs on its GPU, and its user's task runs there from its start.
/// Method: `carma simulate`'s library entry on two simulated A100s, a trace of bob's long
/// tasks and one of alice's, the reservation `paper:1@10m+1h:alice`; the journal's Placed
/// records checked against the window. Trace users need root (their spool files are chowned).
#[test]
fn the_simulator_honours_a_reservation() {
    use carma::journal::Event;
    use carma::sim::{self, SIM_EPOCH_MS, SimOptions};
    if !common::skip::is_root() {
        return common::skip::skip(common::skip::Need::Root, "a trace with users is simulated as root");
    }
    let profiles = "workload,model,batch_size,gpus,exclusive_minutes,class,mem_actual_mib,est_horus_mib,est_faketensor_mib,est_gpumemnet_mib,smact_assumed\n\
        light,m,32,1,3,light,2000,1800,100,8000,0.3\n\
        cnn,m,64,1,30,medium,30000,30000,6000,30000,0.9\n";
    let profiles = sim::parse_profiles("profiles.csv", profiles).unwrap();
    let mut trace = String::from("offset_s,workload,user\n0,light,alice\n");
    for i in 0..6 {
        trace.push_str(&format!("{},cnn,bob\n", i * 60));
    }
    let trace = sim::parse_trace("trace.csv", &trace, &profiles).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = SimOptions {
        trace,
        profiles,
        gpus: sim::GpuSet::parse("2xA100-40GB").unwrap(),
        config: carma::config::Config::default(),
        estimator: sim::Estimator::Oracle,
        params: sim::ModelParams::default(),
        tick_ms: 5000,
        seed: 7,
        faults: sim::FaultPlan::default(),
        mps_caps: true,
        placement_pause_ms: 0,
        max_retries: 3,
        time_limits: sim::TimeLimits::default(),
        home_dir: dir.path().join("home"),
        reservations: vec![sim::reservations::SimReservation::parse("paper:1@10m+1h:alice").unwrap()],
    };
    sim::simulate(&options).expect("simulation runs");
    let (_, records) = sim::read_journal(&carma::home::Home::at(&options.home_dir)).unwrap();
    let (start, end) = (SIM_EPOCH_MS + 600_000, SIM_EPOCH_MS + 600_000 + 3_600_000);
    let gpu0 = records
        .iter()
        .find_map(|r| match &r.event {
            Event::GpuDiscovered { uuid, index: 0, .. } => Some(uuid.clone()),
            _ => None,
        })
        .expect("GPU0 discovered");
    let mut named = std::collections::BTreeSet::new();
    for record in &records {
        if let Event::Submitted { task, spec, .. } = &record.event
            && spec.reservation.as_deref() == Some("paper")
        {
            named.insert(task.clone());
        }
    }
    assert_eq!(named.len(), 1, "alice's one task names the reservation");
    let mut alice_placed = None;
    for record in &records {
        let Event::Placed { task, gpus, .. } = &record.event else { continue };
        if named.contains(task) {
            alice_placed = Some((record.time_ms, gpus.clone()));
        } else if gpus.contains(&gpu0) {
            // bob's tasks declare limits of 1.2-3 × 30 min: one placed on GPU0 would still run
            // at the start, so none is placed there from the first tick on.
            assert!(record.time_ms >= end, "bob's task placed on the reserved GPU at {}", record.time_ms);
        }
    }
    let (at, gpus) = alice_placed.expect("alice's task ran");
    assert!(at >= start && at < start + 60_000, "alice's task started at the window's start: {at}");
    assert_eq!(gpus, [gpu0]);
}

/// Goal: `carma submit --reservation` is refused at once (exit 2), as sbatch refuses it, for a
/// reservation that does not exist or that is not the submitter's.
/// Method: a queue whose owner is its administrator; a reservation for uid 4242 only.
#[test]
fn submit_refuses_a_reservation_that_is_missing_or_not_yours() {
    let home = TestHome::with_fake_gpus(common::cluster::TWO_A100, "magm");
    home.ok(&["tick"]);
    let out = home.run(&["submit", "--reservation", "nope", "--", "sleep", "1"]);
    assert_error(&out, 2, "reservation \"nope\" does not exist; carma reserve list shows them");
    home.ok(&[
        "reserve",
        "create",
        "--name",
        "theirs",
        "--gpus",
        "1",
        "--start",
        "now",
        "--duration",
        "1h",
        "--users",
        "4242",
    ]);
    let out = home.run(&["submit", "--reservation", "theirs", "--", "sleep", "1"]);
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = carma::access::users::display(unsafe { libc::geteuid() });
    assert_error(
        &out,
        2,
        &format!("reservation \"theirs\" is not open to {me} (its users: 4242); ask an administrator"),
    );
}

/// Goal: a reservation whose GPU is lost after it was made is flagged with the reason in
/// `reserve list` and under the GPU in `carma gpus`.
/// Method: a reservation of GPU1 on two fake A100s, then GPU1 reported lost by the fake file
/// and a tick.
#[test]
fn a_reservation_whose_gpu_is_lost_is_flagged() {
    let home = TestHome::with_fake_gpus(common::cluster::TWO_A100, "magm");
    home.ok(&["tick"]);
    home.ok(&[
        "reserve",
        "create",
        "--name",
        "paper",
        "--gpu",
        "1",
        "--start",
        "now+1hour",
        "--duration",
        "1h",
        "--users",
        "root",
    ]);
    let lost = r#"[
  {"uuid": "GPU-fake-0000", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0},
  {"uuid": "GPU-fake-0001", "name": "A100-SXM4-40GB", "memory_total_mib": 40960, "memory_used_mib": 0, "sm_active": 0.0,
   "health": {"state": "lost", "detail": "fell off the bus (XID 79)"}}
]"#;
    std::fs::write(home.gpus_file(), lost).unwrap();
    home.ok(&["tick"]);
    let list: Value = serde_json::from_str(&home.ok(&["reserve", "list", "--json"])).unwrap();
    assert_eq!(list["reservations"][0]["problem"], "cannot be honoured: GPU1 unavailable", "{list:#}");
    let table = home.ok(&["reserve", "list"]);
    assert!(table.contains("\n  cannot be honoured: GPU1 unavailable\n"), "{table}");
    let gpus = home.ok(&["gpus"]);
    assert!(gpus.contains("\n  reservation \"paper\" cannot be honoured: GPU1 unavailable\n"), "{gpus}");
}
