//! Every wire shape's bytes, pinned.
//!
//! If a test here fails, the on-disk format changed: add a new wire type carried by a new
//! variant at the end of [`WireEvent`], and keep reading the old one, instead of editing a pin.
//!
//! Exhaustive by construction:
//! - [`pinned`] matches every [`WireEvent`] variant without a wildcard, so a new variant does
//!   not compile until it has a pin;
//! - [`samples`] must hold one record per variant, in declaration order:
//!   `every_variant_has_a_sample` checks that the sample at position *i* is variant *i* and
//!   that bincode refuses variant `samples().len()`, so no variant can be left without one;
//! - nested enums (health, SM sources, dependency kinds) are pinned variant by variant, by
//!   exhaustive matches as well.

use super::*;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn encode(value: &impl serde::Serialize) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("encodes")
}

fn task(n: u8) -> TaskIdV1 {
    TaskIdV1(format!("065wzsb80000000{n}"))
}

fn spec_v1() -> SpecV1 {
    SpecV1 {
        name: "n".into(),
        command: vec!["a".into(), "b".into()],
        workdir: "/w".into(),
        env: vec![("K".into(), "V".into())],
        gpus: 1,
        memory_mib: Some(300),
        model_summary: Some("m".into()),
        batch_size: Some(8),
        max_retries: 2,
        time_limit_ms: Some(60_000),
        dataset: Some("d".into()),
        policy_hint: None,
        reference: ReferenceV1 { oracle: Some(1), horus: None, faketensor: Some(3), gpumemnet: None },
    }
}

fn spec_v2() -> SpecV2 {
    SpecV2 {
        name: "n".into(),
        command: vec!["a".into()],
        program: Some("/bin/a".into()),
        workdir: "/w".into(),
        env_names: vec!["K".into()],
        export: Some("ALL".into()),
        output: Some("o".into()),
        error: None,
        mig_profile: Some("1g.5gb".into()),
        gpus: 1,
        memory_mib: Some(300),
        model_summary: None,
        batch_size: Some(8),
        max_retries: 2,
        time_limit_ms: Some(60_000),
        dataset: None,
        policy_hint: Some("magm".into()),
        reference: ReferenceV1::default(),
        dependencies: vec![DependencyV2 { kind: DependencyKindV2::AfterOk, task: task(2) }],
        keep_on_dependency_failure: true,
        array: Some(ArrayMemberV2 {
            id: task(3),
            index: 1,
            count: 4,
            running_max: Some(2),
            params: vec![("lr".into(), "0.1".into())],
        }),
        priority: -1,
        nice: 5,
        hold: false,
        notify: vec!["mail".into()],
        mail_user: Some("u@x".into()),
        script: Some("#!/bin/sh".into()),
    }
}

fn sample_v1() -> SampleV1 {
    SampleV1 {
        uuid: "GPU-0".into(),
        index: 0,
        name: "A100".into(),
        memory_total_mib: 40_000,
        memory_used_mib: 100,
        memory_free_mib: 39_900,
        util_gpu_mean: Some(0.5),
        util_last_timestamp_us: Some(9),
        sm_active: Some(0.25),
        sm_active_source: SmSourceV1::Gpm,
        sm_occupancy: None,
        dram_active: Some(0.125),
        power_mw: Some(70_000),
        energy_mj: Some(1_000_000),
        processes: vec![ProcessV1 { pid: 42, used_mib: Some(90) }],
        mig: MigInfoV1 {
            enabled: Some(false),
            instances: vec![MigInstanceV1 {
                uuid: "MIG-1".into(),
                index: 1,
                memory_total_mib: 5_000,
                memory_used_mib: 10,
            }],
        },
        unavailable: vec!["ecc".into()],
    }
}

fn sample_v2() -> SampleV2 {
    SampleV2 {
        uuid: "GPU-0".into(),
        index: 0,
        name: "A100".into(),
        memory_total_mib: 40_000,
        memory_used_mib: 100,
        memory_free_mib: 39_900,
        memory_reserved_mib: Some(500),
        health: HealthV2::Healthy,
        util_gpu_mean: None,
        util_last_timestamp_us: None,
        sm_active: Some(0.5),
        sm_active_source: SmSourceV2::ProcessUtil,
        sm_occupancy: Some(0.25),
        dram_active: None,
        power_mw: Some(70_000),
        energy_mj: None,
        processes: vec![ProcessV2 { pid: 42, used_mib: Some(90), sm_util: Some(0.5) }],
        mig: MigInfoV2 {
            enabled: Some(true),
            instances: vec![MigInstanceV2 {
                uuid: "MIG-1".into(),
                index: 1,
                profile: Some("1g.5gb".into()),
                memory_total_mib: 5_000,
                memory_used_mib: 10,
                processes: vec![],
            }],
        },
        unavailable: vec![],
    }
}

/// One record of every variant, in declaration order.
fn samples() -> Vec<WireEvent> {
    use WireEvent as W;
    let t = task(1);
    vec![
        W::Submitted { task: t.clone(), submitter_uid: 1000, spec: spec_v1() },
        W::Rejected {
            task: Some(t.clone()),
            spool_file: "f".into(),
            submitter_uid: 1000,
            reason: "r".into(),
        },
        W::Cancelled { task: t.clone(), by_uid: 0, reason: "r".into() },
        W::Estimated { task: t.clone(), method: "m".into(), mib: 10, upper_mib: 20, explanation: "e".into() },
        W::Pending { task: t.clone(), reason: "r".into() },
        W::Placed {
            task: t.clone(),
            attempt: 1,
            gpus: vec!["GPU-0".into()],
            exclusive: false,
            requirement_mib: Some(300),
            reason: "r".into(),
        },
        W::Launched {
            task: t.clone(),
            attempt: 2,
            supervisor: ProcessRefV1 { pid: 4321, start_time_ticks: 99, boot_id: "boot".into() },
            adopted: true,
        },
        W::Finished { task: t.clone(), attempt: 1, exit_ms: 5 },
        W::Failed { task: t.clone(), attempt: 1, outcome: "exit 1".into(), reason: "r".into() },
        W::OomDetected { task: t.clone(), attempt: 1, evidence: "e".into(), peak_mib: Some(7) },
        W::Lost { task: t.clone(), attempt: 1, reason: "r".into() },
        W::Requeued {
            task: t.clone(),
            recovery: true,
            requirement_mib: Some(400),
            // No mode carma knows: it reads back as exclusive, the careful one
            // (RequeueMode::from_word; tests/data/v0.2/every.events.jsonl seq 12).
            recovery_mode: "alone".into(),
            reason: "r".into(),
        },
        W::TickCompleted { ingested: 1, rejected: 2, placed: 3, duration_us: 400, rr_cursor: 5 },
        W::MetricSample { sample: sample_v1() },
        W::GpuDiscovered { uuid: "GPU-0".into(), index: 0, name: "A100".into(), memory_total_mib: 40_000 },
        W::GpuProbeStatus { detail: "d".into() },
        W::Stopped { task: t.clone(), attempt: 1, outcome: "o".into() },
        W::Usage { task: t.clone(), attempt: 1, peak_mib: 250 },
        W::EstimateFailed { task: t.clone(), reason: "r".into(), summary_stamp: 6 },
        W::MetricSampleV2 { sample: sample_v2() },
        W::SubmittedV2 { task: t.clone(), submitter_uid: 1000, spec: spec_v2() },
        W::IngestDeferred { entries: 300 },
        W::Reaped { task: t.clone(), attempt: 1, processes: 2, remaining: vec![77], detail: "d".into() },
        W::GpuHealthChanged { uuid: "GPU-0".into(), index: 0, health: HealthV2::Lost { detail: "d".into() } },
        W::SlurmPlaced {
            task: t.clone(),
            attempt: 1,
            cluster: "c".into(),
            job_id: 27,
            node: "n1".into(),
            shards: Some(13),
            shard_mib: 1_000,
        },
        W::SmObserved { task: t.clone(), attempt: 1, sm_util: 0.75 },
        W::Held { task: t.clone(), by_uid: 1000 },
        W::Released { task: t.clone(), by_uid: 1000 },
        W::Updated {
            task: t.clone(),
            by_uid: 1000,
            priority: Some(3),
            nice: None,
            memory_mib: Some(500),
            time_limit_ms: None,
            gpus: Some(2),
        },
        W::Reserved { task: t.clone(), gpus: vec!["GPU-1".into()] },
        W::Notified { task: t.clone(), channel: "mail".into(), detail: "d".into() },
        W::NotifyFailed { task: t.clone(), channel: "mail".into(), reason: "r".into() },
        W::SubmittedV3 {
            task: t.clone(),
            submitter_uid: 1000,
            spec: spec_v2(),
            timing: TimingV3 { signal: Some("B:USR1@5".into()), begin_ms: Some(1_800_000_000_000) },
        },
        W::RequeueRequested { task: t.clone(), by_uid: 1000 },
        W::SubmittedV4 {
            task: t.clone(),
            submitter_uid: 1000,
            spec: spec_v2(),
            timing: TimingV3 { signal: None, begin_ms: None },
            mail: MailV4 { types: "BEGIN,TIME_LIMIT_80".into() },
        },
        W::NotifiedV4 { task: t.clone(), channel: "mail".into(), notice: "BEGIN".into(), detail: "d".into() },
        W::NotifyFailedV4 {
            task: t.clone(),
            channel: "mail".into(),
            notice: "ARRAY".into(),
            reason: "r".into(),
        },
        W::MemoryExceeded {
            task: t.clone(),
            attempt: 1,
            gpu: "GPU-0".into(),
            used_mib: 10_035,
            declared_mib: 1024,
            reason: "r".into(),
        },
        submitted_v5(),
        W::Preempted { task: t.clone(), attempt: 2, by: task(2), reason: "r".into(), lost_ms: 90_000 },
        W::Checkpointed { task: t, attempt: 2 },
        reservation_created(),
        W::ReservationDeleted { name: "paper".into(), by_uid: 0 },
        W::Suspended { task: task(1), attempt: 2, by: task(2) },
        W::Resumed { task: task(1), attempt: 2 },
        W::PreemptionWithdrawn { task: task(1), attempt: 2, reason: "r".into() },
        submitted_v6(),
        W::SuspensionEnded { task: task(1), attempt: 2, reason: "r".into() },
    ]
}

/// The sample of `SubmittedV5`: host limits, requeue, a reservation and a session mode.
fn submitted_v5() -> WireEvent {
    use WireEvent as W;
    W::SubmittedV5 {
        task: task(1),
        submitter_uid: 1000,
        spec: spec_v2(),
        timing: TimingV3 { signal: None, begin_ms: None },
        mail: MailV4 { types: String::new() },
        extras: ExtrasV5 {
            host_mem_mib: Some(16_384),
            cpus: Some(8),
            requeue: Some(true),
            reservation: Some("paper".into()),
            interactive: Some("alloc".into()),
        },
    }
}

/// The sample of `SubmittedV6`: `SubmittedV5`'s, its time limit the queue's maximum.
fn submitted_v6() -> WireEvent {
    let WireEvent::SubmittedV5 { task, submitter_uid, spec, timing, mail, extras } = submitted_v5() else {
        unreachable!("submitted_v5 is a SubmittedV5")
    };
    let limits = LimitsV6 { time_limit_source: Some(TimeLimitSourceV6::QueueMax) };
    WireEvent::SubmittedV6 { task, submitter_uid, spec, timing, mail, extras, limits }
}

/// The sample of `ReservationCreated`: two named GPUs for two users.
fn reservation_created() -> WireEvent {
    WireEvent::ReservationCreated {
        name: "paper".into(),
        start_ms: 1_800_000_000_000,
        end_ms: 1_800_172_800_000,
        users: vec![1001, 1002],
        gpu_count: 2,
        gpus: vec!["GPU-0".into(), "GPU-1".into()],
        by_uid: 0,
    }
}

/// The bincode bytes of `WireRecord { time_ms: 7, event }` for each sample. Exhaustive: a new
/// variant does not compile without a pin.
fn pinned(event: &WireEvent) -> &'static str {
    use WireEvent as W;
    match event {
        W::Submitted { .. } => {
            "070010303635777a7362383030303030303031fbe803016e0201610162022f7701014b01560101fb2c0101016d01080201fb60ea01016400010100010300"
        }
        W::Rejected { .. } => "07010110303635777a73623830303030303030310166fbe8030172",
        W::Cancelled { .. } => "070210303635777a7362383030303030303031000172",
        W::Estimated { .. } => "070310303635777a7362383030303030303031016d0a140165",
        W::Pending { .. } => "070410303635777a73623830303030303030310172",
        W::Placed { .. } => "070510303635777a73623830303030303030310101054750552d300001fb2c010172",
        W::Launched { .. } => "070610303635777a736238303030303030303102fbe1106304626f6f7401",
        W::Finished { .. } => "070710303635777a73623830303030303030310105",
        W::Failed { .. } => "070810303635777a736238303030303030303101066578697420310172",
        W::OomDetected { .. } => "070910303635777a73623830303030303030310101650107",
        W::Lost { .. } => "070a10303635777a7362383030303030303031010172",
        W::Requeued { .. } => "070b10303635777a73623830303030303030310101fb900105616c6f6e650172",
        W::TickCompleted { .. } => "070c010203fb900105",
        W::MetricSample { .. } => {
            "070d054750552d30000441313030fb409c64fbdc9b010000003f0109010000803e0000010000003e01fc7011010001fc40420f00012a015a010001054d49472d3101fb88130a0103656363"
        }
        W::GpuDiscovered { .. } => "070e054750552d30000441313030fb409c",
        W::GpuProbeStatus { .. } => "070f0164",
        W::Stopped { .. } => "071010303635777a736238303030303030303101016f",
        W::Usage { .. } => "071110303635777a736238303030303030303101fa",
        W::EstimateFailed { .. } => "071210303635777a7362383030303030303031017206",
        W::MetricSampleV2 { .. } => {
            "0713054750552d30000441313030fb409c64fbdc9b01fbf401000000010000003f05010000803e0001fc7011010000012a015a010000003f010101054d49472d3101010631672e356762fb88130a0000"
        }
        W::SubmittedV2 { .. } => {
            "071410303635777a7362383030303030303031fbe803016e01016101062f62696e2f61022f7701014b0103414c4c01016f00010631672e3567620101fb2c010001080201fb60ea0001046d61676d00000000010010303635777a7362383030303030303032010110303635777a73623830303030303030330104010201026c7203302e31010a0001046d61696c0103754078010923212f62696e2f7368"
        }
        W::IngestDeferred { .. } => "0715fb2c01",
        W::Reaped { .. } => "071610303635777a73623830303030303030310102014d0164",
        W::GpuHealthChanged { .. } => "0717054750552d3000010164",
        W::SlurmPlaced { .. } => "071810303635777a73623830303030303030310101631b026e31010dfbe803",
        W::SmObserved { .. } => "071910303635777a7362383030303030303031010000403f",
        W::Held { .. } => "071a10303635777a7362383030303030303031fbe803",
        W::Released { .. } => "071b10303635777a7362383030303030303031fbe803",
        W::Updated { .. } => "071c10303635777a7362383030303030303031fbe80301060001fbf401000102",
        W::Reserved { .. } => "071d10303635777a736238303030303030303101054750552d31",
        W::Notified { .. } => "071e10303635777a7362383030303030303031046d61696c0164",
        W::NotifyFailed { .. } => "071f10303635777a7362383030303030303031046d61696c0172",
        W::SubmittedV3 { .. } => {
            "072010303635777a7362383030303030303031fbe803016e01016101062f62696e2f61022f7701014b0103414c4c01016f00010631672e3567620101fb2c010001080201fb60ea0001046d61676d00000000010010303635777a7362383030303030303032010110303635777a73623830303030303030330104010201026c7203302e31010a0001046d61696c0103754078010923212f62696e2f73680108423a55535231403501fd00505c18a3010000"
        }
        W::RequeueRequested { .. } => "072110303635777a7362383030303030303031fbe803",
        W::SubmittedV4 { .. } => {
            "072210303635777a7362383030303030303031fbe803016e01016101062f62696e2f61022f7701014b0103414c4c01016f00010631672e3567620101fb2c010001080201fb60ea0001046d61676d00000000010010303635777a7362383030303030303032010110303635777a73623830303030303030330104010201026c7203302e31010a0001046d61696c0103754078010923212f62696e2f7368000013424547494e2c54494d455f4c494d49545f3830"
        }
        W::NotifiedV4 { .. } => "072310303635777a7362383030303030303031046d61696c05424547494e0164",
        W::NotifyFailedV4 { .. } => "072410303635777a7362383030303030303031046d61696c0541525241590172",
        W::MemoryExceeded { .. } => "072510303635777a736238303030303030303101054750552d30fb3327fb00040172",
        W::SubmittedV5 { .. } => {
            "072610303635777a7362383030303030303031fbe803016e01016101062f62696e2f61022f7701014b0103414c4c01016f00010631672e3567620101fb2c010001080201fb60ea0001046d61676d00000000010010303635777a7362383030303030303032010110303635777a73623830303030303030330104010201026c7203302e31010a0001046d61696c0103754078010923212f62696e2f736800000001fb004001080101010570617065720105616c6c6f63"
        }
        W::Preempted { .. } => {
            "072710303635777a73623830303030303030310210303635777a73623830303030303030320172fc905f0100"
        }
        W::Checkpointed { .. } => "072810303635777a736238303030303030303102",
        W::ReservationCreated { .. } => {
            "0729057061706572fd00505c18a3010000fd0008a922a301000002fbe903fbea030202054750552d30054750552d3100"
        }
        W::ReservationDeleted { .. } => "072a05706170657200",
        W::Suspended { .. } => "072b10303635777a73623830303030303030310210303635777a7362383030303030303032",
        W::Resumed { .. } => "072c10303635777a736238303030303030303102",
        W::PreemptionWithdrawn { .. } => "072d10303635777a7362383030303030303031020172",
        W::SubmittedV6 { .. } => {
            "072e10303635777a7362383030303030303031fbe803016e01016101062f62696e2f61022f7701014b0103414c4c01016f00010631672e3567620101fb2c010001080201fb60ea0001046d61676d00000000010010303635777a7362383030303030303032010110303635777a73623830303030303030330104010201026c7203302e31010a0001046d61696c0103754078010923212f62696e2f736800000001fb004001080101010570617065720105616c6c6f630102"
        }
        W::SuspensionEnded { .. } => "072f10303635777a7362383030303030303031020172",
    }
}

/// The reservation records' payloads, after the time and the variant index (which a merge of
/// variants appended beside them may renumber): name, window, users, count, GPUs, uid.
#[test]
fn reservation_records_keep_their_payload_bytes() {
    let created = encode(&WireRecord { time_ms: 7, event: reservation_created() });
    assert_eq!(
        hex(&created[2..]),
        "057061706572fd00505c18a3010000fd0008a922a301000002fbe903fbea030202054750552d30054750552d3100"
    );
    let deleted = WireEvent::ReservationDeleted { name: "paper".into(), by_uid: 0 };
    assert_eq!(hex(&encode(&WireRecord { time_ms: 7, event: deleted })[2..]), "05706170657200");
}

/// The suspend records' payloads, after the time and the variant index: task, attempt, by.
#[test]
fn suspend_records_keep_their_payload_bytes() {
    let suspended = WireEvent::Suspended { task: task(1), attempt: 2, by: task(2) };
    assert_eq!(
        hex(&encode(&WireRecord { time_ms: 7, event: suspended })[2..]),
        "10303635777a73623830303030303030310210303635777a7362383030303030303032"
    );
    let resumed = WireEvent::Resumed { task: task(1), attempt: 2 };
    assert_eq!(
        hex(&encode(&WireRecord { time_ms: 7, event: resumed })[2..]),
        "10303635777a736238303030303030303102"
    );
}

/// The ended suspension's payload, after the time and the variant index: task, attempt, reason.
#[test]
fn suspension_ended_keeps_its_payload_bytes() {
    let ended = WireEvent::SuspensionEnded { task: task(1), attempt: 2, reason: "r".into() };
    assert_eq!(
        hex(&encode(&WireRecord { time_ms: 7, event: ended })[2..]),
        "10303635777a7362383030303030303031020172"
    );
}

/// The withdrawal's payload, after the time and the variant index: task, attempt, reason.
#[test]
fn preemption_withdrawn_keeps_its_payload_bytes() {
    let withdrawn = WireEvent::PreemptionWithdrawn { task: task(1), attempt: 2, reason: "r".into() };
    assert_eq!(
        hex(&encode(&WireRecord { time_ms: 7, event: withdrawn })[2..]),
        "10303635777a7362383030303030303031020172"
    );
}

/// `SubmittedV6`'s payload, after the time and the variant index (which a merge of variants
/// appended beside it may renumber): `SubmittedV5`'s payload, then the time limit's source.
#[test]
fn submitted_v6_keeps_its_payload_bytes() {
    let v5 = encode(&WireRecord { time_ms: 7, event: submitted_v5() });
    let v6 = encode(&WireRecord { time_ms: 7, event: submitted_v6() });
    assert_eq!(hex(&v6[2..]), format!("{}0102", hex(&v5[2..])));
}

#[test]
fn every_variant_has_a_sample() {
    let samples = samples();
    for (i, event) in samples.iter().enumerate() {
        let bytes = encode(&WireRecord { time_ms: 7, event: event.clone() });
        // time_ms 7 is one varint byte; the variant index follows (one byte below 251).
        assert_eq!(usize::from(bytes[1]), i, "sample {i} is not variant {i}: {event:?}");
    }
    // bincode refuses the variant after the last: the samples cover every variant.
    let count = u8::try_from(samples.len()).expect("fewer than 251 variants");
    let beyond = [7u8, count];
    let decoded: Result<(WireRecord, usize), _> =
        bincode::serde::decode_from_slice(&beyond, bincode::config::standard());
    assert!(decoded.is_err(), "variant {count} decodes: a WireEvent variant has no sample");
}

#[test]
fn every_variant_keeps_its_pinned_bytes() {
    let mut drifted = Vec::new();
    for event in samples() {
        let record = WireRecord { time_ms: 7, event };
        let bytes = encode(&record);
        let got = hex(&bytes);
        if got != pinned(&record.event) {
            drifted.push(format!("{:?}: {got}", std::mem::discriminant(&record.event)));
        }
        let (back, used): (WireRecord, usize) =
            bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).expect("decodes");
        assert_eq!((back, used), (record, bytes.len()));
    }
    assert!(drifted.is_empty(), "wire bytes changed:\n{}", drifted.join("\n"));
}

/// The nested enums' variants, each pinned (bincode writes a variant as its index, then its
/// fields). Exhaustive matches make a new variant fail to compile here.
#[test]
fn nested_enum_variants_keep_their_bytes() {
    fn health(h: &HealthV2) -> &'static str {
        match h {
            HealthV2::Healthy => "00",
            HealthV2::Lost { .. } => "010164",
            HealthV2::XidError { .. } => "02300164",
            HealthV2::Unreadable { .. } => "030164",
        }
    }
    for h in [
        HealthV2::Healthy,
        HealthV2::Lost { detail: "d".into() },
        HealthV2::XidError { xid: 48, detail: "d".into() },
        HealthV2::Unreadable { detail: "d".into() },
    ] {
        assert_eq!(hex(&encode(&h)), health(&h), "{h:?}");
    }
    fn source_v1(s: SmSourceV1) -> &'static str {
        match s {
            SmSourceV1::Gpm => "00",
            SmSourceV1::File => "01",
            SmSourceV1::Simulated => "02",
            SmSourceV1::Unavailable => "03",
        }
    }
    for s in [SmSourceV1::Gpm, SmSourceV1::File, SmSourceV1::Simulated, SmSourceV1::Unavailable] {
        assert_eq!(hex(&encode(&s)), source_v1(s), "{s:?}");
    }
    fn source_v2(s: SmSourceV2) -> &'static str {
        match s {
            SmSourceV2::Gpm => "00",
            SmSourceV2::File => "01",
            SmSourceV2::Simulated => "02",
            SmSourceV2::Unavailable => "03",
            SmSourceV2::DeviceUtil => "04",
            SmSourceV2::ProcessUtil => "05",
        }
    }
    for s in [
        SmSourceV2::Gpm,
        SmSourceV2::File,
        SmSourceV2::Simulated,
        SmSourceV2::Unavailable,
        SmSourceV2::DeviceUtil,
        SmSourceV2::ProcessUtil,
    ] {
        assert_eq!(hex(&encode(&s)), source_v2(s), "{s:?}");
    }
    fn kind(k: DependencyKindV2) -> &'static str {
        match k {
            DependencyKindV2::AfterOk => "00",
            DependencyKindV2::AfterAny => "01",
            DependencyKindV2::AfterNotOk => "02",
        }
    }
    for k in [DependencyKindV2::AfterOk, DependencyKindV2::AfterAny, DependencyKindV2::AfterNotOk] {
        assert_eq!(hex(&encode(&k)), kind(k), "{k:?}");
    }
    fn limit_source(s: TimeLimitSourceV6) -> &'static str {
        match s {
            TimeLimitSourceV6::Task => "00",
            TimeLimitSourceV6::QueueDefault => "01",
            TimeLimitSourceV6::QueueMax => "02",
            TimeLimitSourceV6::QueueUnlimited => "03",
        }
    }
    for s in [
        TimeLimitSourceV6::Task,
        TimeLimitSourceV6::QueueDefault,
        TimeLimitSourceV6::QueueMax,
        TimeLimitSourceV6::QueueUnlimited,
    ] {
        assert_eq!(hex(&encode(&s)), limit_source(s), "{s:?}");
    }
}

/// The ids the wire owns encode exactly as the domain's `TaskId` did before (a newtype of a
/// string is the bare string), so journals written before the split read the same.
#[test]
fn wire_ids_encode_as_the_domain_ids_did() {
    let domain = crate::id::TaskId::from_parts(1_700_000_000_000, 7);
    let wire = TaskIdV1::from(domain.clone());
    assert_eq!(encode(&wire), encode(&domain));
    assert_eq!(crate::id::TaskId::from(wire), domain);
}

/// Writes `tests/data/v0.2/every.redb`: one record of every event kind, in the newest wire
/// shapes, through the one write path. Run once per format generation, by hand:
/// `CARMA_WRITE_GOLDEN=tests/data/v0.2/every.redb cargo test --lib write_golden -- --ignored`.
/// Never regenerate an existing golden file: a new format gets a new folder.
#[test]
#[ignore = "writes a golden journal; run by hand once per format generation"]
fn write_golden_journal_of_every_kind() {
    let path = std::env::var("CARMA_WRITE_GOLDEN").expect("CARMA_WRITE_GOLDEN=PATH");
    let path = std::path::Path::new(&path);
    assert!(!path.exists(), "{}: golden files are never rewritten", path.display());
    crate::journal::Journal::create(path).expect("create");
    let mut journal = crate::journal::Journal::open(path).expect("open");
    let mut state = journal.load_state().expect("state");
    let records: Vec<_> = samples()
        .into_iter()
        .enumerate()
        .map(|(i, event)| from_wire(WireRecord { time_ms: 1_700_000_000_000 + i as u64, event }))
        .collect();
    journal.append(&records, &mut state).expect("append");
}
