//! One test per rule of SEMANTICS.md sections 1-3 (named after the rule id) and the litmus programs L1-L10: each
//! states the verdict the rule implies and checks the explorer reaches it. Snapshots keep the rendered explanation.

mod common;
use common::{check_text, kinds};

/// A one-rank program with the given declarations and the ops of its main thread.
fn gpu1(streams: &str, events: &str, buffers: &str, ops: &str) -> String {
    format!(
        "Program(ranks: 1, streams: [{streams}], events: [{events}], buffers: [{buffers}], comms: [], \
         threads: [Thread(\"main\", [{ops}])])"
    )
}

/// A two-rank program (world communicator) with one SPMD main thread.
fn gpu2(streams: &str, events: &str, buffers: &str, ops: &str) -> String {
    format!(
        "Program(ranks: 2, streams: [{streams}], events: [{events}], buffers: [{buffers}], comms: [Comm(\"world\")], \
         threads: [Thread(\"main\", [{ops}])])"
    )
}

const AB: &str = r#"Stream("sA", NonBlocking), Stream("sB", NonBlocking)"#;
const BUFS: &str = r#"Buffer("a", "1 MiB"), Buffer("b", "1 MiB"), Buffer("p", "1 MiB", space: PinnedHost)"#;

fn verdict(name: &str, text: &str, profile: &str) -> Vec<String> {
    kinds(&check_text(name, text, profile))
}

#[test]
fn s1_l1_one_stream_runs_in_issue_order() {
    let t = gpu1(AB, "", BUFS, r#"Kernel("w", stream: "sA", writes: ["a"]), Kernel("r", stream: "sA", reads: ["a"])"#);
    assert_eq!(verdict("L1", &t, "portable"), Vec::<String>::new());
}

#[test]
fn s1_l2_two_streams_are_unordered() {
    let t = gpu1(AB, "", BUFS, r#"Kernel("w", stream: "sA", writes: ["a"]), Kernel("r", stream: "sB", reads: ["a"])"#);
    assert_eq!(verdict("L2", &t, "portable"), vec!["data race always"]);
}

#[test]
fn s1_no_independent_progress_can_starve_a_second_communicator() {
    // Each rank launches on comm c1 then on comm c2, on two streams; rank 1 in the opposite order of recv/send.
    // With independent progress both launches run side by side and complete; without it, a spinning launch on
    // one stream can keep the other from ever starting (S1).
    let t = r#"Program(ranks: 2, streams: [Stream("sA", NonBlocking), Stream("sB", NonBlocking)],
        buffers: [Buffer("x", "1 MiB"), Buffer("y", "1 MiB"), Buffer("w1", "4 KiB"), Buffer("w2", "4 KiB"), Buffer("w3", "4 KiB"), Buffer("w4", "4 KiB")],
        comms: [Comm("c1"), Comm("c2")],
        threads: [Thread("main", [
            // Grouped warm-ups set up both communicators' connections first (N7); both on sA, so that they
            // cannot starve each other.
            Group([Send(to: Next, buf: "w1", stream: "sA", comm: "c1"), Recv(from: Prev, buf: "w2", stream: "sA", comm: "c1")]),
            Group([Send(to: Next, buf: "w3", stream: "sA", comm: "c2"), Recv(from: Prev, buf: "w4", stream: "sA", comm: "c2")]),
            DeviceSync,
            Parity(even: [Send(to: Next, buf: "x", stream: "sA", comm: "c1"), Recv(from: Prev, buf: "y", stream: "sB", comm: "c2")],
                   odd:  [Send(to: Next, buf: "x", stream: "sB", comm: "c2"), Recv(from: Prev, buf: "y", stream: "sA", comm: "c1")]),
            DeviceSync,
        ])])"#;
    let portable = check_text("s1-starve", t, "portable");
    assert_eq!(kinds(&portable), vec!["deadlock sometimes"]);
    assert!(portable.findings.iter().any(|f| f.text.contains("S1: no guaranteed independent progress")), "{}", portable.to_text());
    let p = cuorder_model::format::load("s1-starve", t).unwrap();
    let overlap = cuorder_model::profile::Profile { independent_progress: true, ..cuorder_model::profile::Profile::portable() };
    assert_eq!(kinds(&cuorder::report::check(&p, &overlap, &Default::default())), Vec::<String>::new());
}

#[test]
fn s2_l6_legacy_default_stream_waits_for_blocking_streams() {
    let blocking = gpu1(r#"Stream("sA", Blocking)"#, "", BUFS, r#"Kernel("w", stream: "sA", writes: ["a"]), Kernel("r", stream: "sL", reads: ["a"])"#);
    assert_eq!(verdict("L6", &blocking, "portable"), Vec::<String>::new());
    let nonblocking = gpu1(r#"Stream("sA", NonBlocking)"#, "", BUFS, r#"Kernel("w", stream: "sA", writes: ["a"]), Kernel("r", stream: "sL", reads: ["a"])"#);
    assert_eq!(verdict("L6nb", &nonblocking, "portable"), vec!["data race always"]);
    // The other direction: a blocking stream waits for the legacy stream.
    let back = gpu1(r#"Stream("sA", Blocking)"#, "", BUFS, r#"Kernel("w", stream: "sL", writes: ["a"]), Kernel("r", stream: "sA", reads: ["a"])"#);
    assert_eq!(verdict("L6back", &back, "portable"), Vec::<String>::new());
    // The per-thread default stream "is not a non-blocking stream and will synchronize with the legacy default
    // stream" (CUDA Runtime API, "Stream synchronization behavior"; SEMANTICS.md S2 says otherwise and is wrong).
    let pt = gpu1("", "", BUFS, r#"Kernel("w", stream: "sPT", writes: ["a"]), Kernel("r", stream: "sL", reads: ["a"])"#);
    assert_eq!(verdict("L6pt", &pt, "portable"), Vec::<String>::new());
    let pt_back = gpu1("", "", BUFS, r#"Kernel("w", stream: "sL", writes: ["a"]), Kernel("r", stream: "sPT", reads: ["a"])"#);
    assert_eq!(verdict("L6pt-back", &pt_back, "portable"), Vec::<String>::new());
    // A non-blocking stream does not.
    let nb = gpu1(AB, "", BUFS, r#"Kernel("w", stream: "sL", writes: ["a"]), Kernel("r", stream: "sA", reads: ["a"])"#);
    assert_eq!(verdict("L6nb-back", &nb, "portable"), vec!["data race always"]);
}

#[test]
fn s3_l3_record_then_wait_orders() {
    let t = gpu1(AB, r#""e""#, BUFS, r#"Kernel("w", stream: "sA", writes: ["a"]), Record("e", stream: "sA"), Wait("e", stream: "sB"), Kernel("r", stream: "sB", reads: ["a"])"#);
    assert_eq!(verdict("L3", &t, "portable"), Vec::<String>::new());
}

#[test]
fn s3_l4_record_captures_only_earlier_work() {
    let t = gpu1(AB, r#""e""#, BUFS, r#"Record("e", stream: "sA"), Kernel("w", stream: "sA", writes: ["a"]), Wait("e", stream: "sB"), Kernel("r", stream: "sB", reads: ["a"])"#);
    let r = check_text("L4", &t, "portable");
    assert_eq!(kinds(&r), vec!["data race always"]);
    assert!(r.findings[0].text.contains("S3"), "{}", r.findings[0].text);
    insta::assert_snapshot!(common::without_stats(&r.to_text()));
}

#[test]
fn s3_l5_wait_before_any_record_orders_nothing() {
    let t = gpu1(AB, r#""e""#, BUFS, r#"Wait("e", stream: "sB"), Kernel("w", stream: "sA", writes: ["a"]), Record("e", stream: "sA"), Kernel("r", stream: "sB", reads: ["a"])"#);
    let r = check_text("L5", &t, "portable");
    assert_eq!(kinds(&r), vec!["data race always"]);
    assert!(r.findings[0].text.contains("before any record"), "{}", r.findings[0].text);
}

#[test]
fn s3_rerecord_does_not_change_an_earlier_wait() {
    // cutorch#222 variant: each wait binds to the record before it, so both writes are ordered.
    let t = gpu1(r#"Stream("s1", NonBlocking), Stream("s2", NonBlocking), Stream("s3", NonBlocking)"#, r#""e""#, BUFS,
        r#"Kernel("k1", stream: "s1", writes: ["a"]), Kernel("k2", stream: "s2", writes: ["b"]),
           Record("e", stream: "s1"), Wait("e", stream: "s3"), Record("e", stream: "s2"), Wait("e", stream: "s3"),
           Kernel("k3", stream: "s3", reads: ["a", "b"])"#);
    assert_eq!(verdict("rerecord", &t, "portable"), Vec::<String>::new());
}

#[test]
fn s3_cross_device_wait_is_allowed() {
    // One process drives both devices: stream sA of rank 1 waits on an event of rank 0 (allowed; S3).
    let t = r#"Program(ranks: 2, streams: [Stream("sA", NonBlocking)], events: ["e"], buffers: [Buffer("a", "1 MiB")],
        threads: [Thread("main", ranks: [0], ops: [
            Kernel("w", stream: "sA", writes: ["a"]), Record("e", stream: "sA"), Wait("e", stream: "sA@1"),
            Kernel("r", stream: "sA@1", reads: ["a"]), DeviceSync])])"#;
    assert_eq!(verdict("xdev", t, "portable"), Vec::<String>::new());
}

#[test]
fn s4_l7_stream_sync_orders_host_read() {
    let t = gpu1(AB, "", BUFS, r#"Kernel("w", stream: "sA", writes: ["p"]), StreamSync("sA"), HostRead("p")"#);
    assert_eq!(verdict("L7", &t, "portable"), Vec::<String>::new());
    let t = gpu1(AB, "", BUFS, r#"Kernel("w", stream: "sA", writes: ["p"]), HostRead("p")"#);
    assert_eq!(verdict("L7bad", &t, "portable"), vec!["data race always"]);
}

#[test]
fn s4_l8_device_sync_orders_every_stream() {
    let t = gpu1(AB, "", BUFS, r#"Kernel("wa", stream: "sA", writes: ["a"]), Kernel("wb", stream: "sB", writes: ["b"]), DeviceSync, Kernel("r", stream: "sA", reads: ["a", "b"])"#);
    assert_eq!(verdict("L8", &t, "portable"), Vec::<String>::new());
}

#[test]
fn s4_l9_event_sync_then_sync_memcpy() {
    let t = gpu1(AB, r#""e""#, BUFS, r#"Kernel("w", stream: "sA", writes: ["a"]), Record("e", stream: "sA"), EventSync("e"), Memcpy(dst: "p", src: "a")"#);
    assert_eq!(verdict("L9", &t, "portable"), Vec::<String>::new());
}

#[test]
fn s4_l10_event_query_has_both_answers() {
    use cuorder_model::profile::Profile;
    use cuorder_model::semantics::Semantics;
    use cuorder_sim::run::run;
    use cuorder_sim::scheduler::RandomScheduler;
    let t = gpu1(AB, r#""e""#, BUFS, r#"Kernel("w", stream: "sA", writes: ["a"], duration: "1 ms"), Record("e", stream: "sA"), EventQuery("e")"#);
    let p = cuorder_model::format::load("L10", &t).unwrap();
    let prof = Profile::portable();
    let sem = Semantics::new(&p, &prof);
    let mut answers = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let tr = run(&sem, &mut RandomScheduler::new(seed), Some(seed), 1000);
        for e in tr.events.iter().filter(|e| e.text.contains("event_query")) {
            answers.insert(e.text.ends_with(": ready"));
        }
    }
    assert_eq!(answers.len(), 2, "both answers must be possible: {answers:?}");
}

#[test]
fn s5_synchronous_memcpy_blocks_the_host() {
    let t = gpu1(AB, "", r#"Buffer("a", "1 MiB"), Buffer("h", "1 MiB", space: PageableHost)"#,
        r#"Kernel("w", stream: "sL", writes: ["a"]), Memcpy(dst: "h", src: "a"), HostRead("h")"#);
    assert_eq!(verdict("S5", &t, "portable"), Vec::<String>::new());
    // Async copy into pinned memory does not block: reading it on the host races.
    let t = gpu1(AB, "", BUFS, r#"Memcpy(dst: "p", src: "a", stream: "sA"), HostRead("p")"#);
    assert_eq!(verdict("S5async", &t, "portable"), vec!["data race always"]);
    // An async copy into pageable memory *might* be host-synchronous (CUDA "API synchronization behavior"): nothing
    // may rely on it, so reading it on the host races (issue 7, item 5; it was taken as ordering before).
    let t = gpu1(AB, "", r#"Buffer("a", "1 MiB"), Buffer("h", "1 MiB", space: PageableHost)"#,
        r#"Memcpy(dst: "h", src: "a", stream: "sA"), HostRead("h")"#);
    assert_eq!(verdict("S5pageable", &t, "portable"), vec!["data race always"]);
}

#[test]
fn n1_nccl_calls_return_before_the_gpu_runs_them() {
    // The host writes the send buffer right after ncclSend returns: races with the send kernel reading it.
    let t = gpu2(AB, "", r#"Buffer("x", "1 MiB", space: PinnedHost), Buffer("y", "1 MiB")"#,
        r#"Group([Send(to: Next, buf: "x", stream: "sA"), Recv(from: Prev, buf: "y", stream: "sA")]), HostWrite("x"), StreamSync("sA")"#);
    // One race per rank: each rank's host write against its own send.
    assert_eq!(verdict("N1", &t, "portable"), vec!["data race always", "data race always"]);
}

#[test]
fn n2_send_without_recv_completes_only_within_the_eager_window() {
    let t = |size: &str| {
        format!(
            r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "{size}"), Buffer("w", "{size}")], comms: [Comm("world")],
            threads: [Thread("main", [
                // A grouped warm-up sets up both directions of the connection (N7), as NCCL's users do.
                Group([Send(to: Next, buf: "x", stream: "s0"), Recv(from: Prev, buf: "w", stream: "s0")]),
                StreamSync("s0"),
                OnRanks([0], [Send(to: Rank(1), buf: "x", stream: "s0"), StreamSync("s0"), Barrier("b")]),
                OnRanks([1], [Barrier("b"), Recv(from: Rank(0), buf: "x", stream: "s0"), StreamSync("s0")]),
            ])])"#
        )
    };
    // Rank 0 waits for its send before the barrier that rank 1 must pass before it receives. Portable: the send may
    // be buffered eagerly or wait for its recv (both explored).
    assert_eq!(verdict("N2small", &t("1 MiB"), "portable"), vec!["deadlock sometimes"]);
    assert_eq!(verdict("N2small", &t("1 MiB"), "eager"), Vec::<String>::new());
    assert_eq!(verdict("N2big", &t("64 MiB"), "eager"), vec!["deadlock always"]);
}

#[test]
fn n3_matching_is_positional() {
    // Rank 0 sends x then y; rank 1 receives into u then v: u gets x. Sizes differ per position: valid.
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB"), Buffer("y", "2 MiB")],
        comms: [Comm("world")],
        threads: [Thread("main", [
            OnRanks([0], [Group([Send(to: Rank(1), buf: "x", stream: "s0"), Send(to: Rank(1), buf: "y", stream: "s0")])]),
            OnRanks([1], [Group([Recv(from: Rank(0), buf: "x", stream: "s0"), Recv(from: Rank(0), buf: "y", stream: "s0")])]),
            StreamSync("s0")])])"#;
    assert_eq!(verdict("N3", t, "portable"), Vec::<String>::new());
}

#[test]
fn n4_send_and_recv_in_one_group_never_deadlock() {
    let t = gpu2(AB, "", r#"Buffer("x", "1 GiB"), Buffer("y", "1 GiB")"#,
        r#"Group([Send(to: Next, buf: "x", stream: "sA"), Recv(from: Prev, buf: "y", stream: "sA")]), StreamSync("sA")"#);
    assert_eq!(verdict("N4", &t, "portable"), Vec::<String>::new());
}

#[test]
fn n5_launches_on_one_communicator_are_serialized_across_streams() {
    // Send on stream A, then recv on stream B, same communicator, both ranks: hangs (SEMANTICS.md N5, HW). A grouped
    // warm-up sets the connections up first (N7).
    let t = gpu2(AB, "", r#"Buffer("x", "1 GiB"), Buffer("y", "1 GiB")"#,
        r#"Group([Send(to: Next, buf: "x", stream: "sA"), Recv(from: Prev, buf: "y", stream: "sA")]), DeviceSync,
           Send(to: Next, buf: "x", stream: "sA"), Recv(from: Prev, buf: "y", stream: "sB"), DeviceSync"#);
    let r = check_text("N5", &t, "eager");
    assert_eq!(kinds(&r), vec!["deadlock always"]);
    assert!(r.findings[0].text.contains("N5"), "{}", r.findings[0].text);
    // Portable: the 1 GiB send may also be buffered eagerly, so the hang happens in some executions.
    let r = check_text("N5", &t, "portable");
    assert_eq!(kinds(&r), vec!["deadlock sometimes"]);
    assert!(r.findings[0].text.contains("N5"), "{}", r.findings[0].text);
}

#[test]
fn n6_communicators_used_in_inconsistent_orders_deadlock() {
    // Rank 0 all-reduces on c1 then c2, rank 1 on c2 then c1, one stream each.
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("g", "1 MiB")],
        comms: [Comm("c1"), Comm("c2")],
        threads: [Thread("main", [
            Parity(even: [AllReduce(buf: "g", stream: "s0", comm: "c1"), AllReduce(buf: "g", stream: "s0", comm: "c2")],
                   odd:  [AllReduce(buf: "g", stream: "s0", comm: "c2"), AllReduce(buf: "g", stream: "s0", comm: "c1")]),
            StreamSync("s0")])])"#;
    // Under `portable` collectives connect at init or lazily (N7): lazily, the hosts hang in set-up; at init, the
    // launches hang on the devices. Each deadlock needs its platform choice, and no execution completes.
    assert_eq!(verdict("N6", t, "portable"), vec!["deadlock always", "deadlock always"]);
    assert_eq!(verdict("N6eager", t, "eager"), vec!["deadlock always"]);
}

#[test]
fn n7_ungrouped_first_contact_hangs_with_lazy_connections() {
    let t = gpu2(AB, "", r#"Buffer("x", "1 KiB"), Buffer("y", "1 KiB")"#,
        r#"Send(to: Next, buf: "x", stream: "sA"), Recv(from: Prev, buf: "y", stream: "sA"), StreamSync("sA")"#);
    let r = check_text("N7", &t, "eager");
    assert_eq!(kinds(&r), vec!["deadlock always"]);
    assert!(r.findings[0].text.contains("not mirrored"), "{}", r.findings[0].text);
    // After a grouped warm-up the connections exist and the same small exchange completes eagerly.
    let warm = gpu2(AB, "", r#"Buffer("x", "1 KiB"), Buffer("y", "1 KiB")"#,
        r#"Group([Send(to: Next, buf: "x", stream: "sA"), Recv(from: Prev, buf: "y", stream: "sA")]),
           Send(to: Next, buf: "x", stream: "sA"), Recv(from: Prev, buf: "y", stream: "sA"), StreamSync("sA")"#);
    assert_eq!(verdict("N7warm", &warm, "eager"), Vec::<String>::new());
}

/// Issue 30: `portable` took collective connection set-up at first use as a guaranteed host rendezvous (NCCL >=
/// 2.22's default), so a cudaFree cycle (S7) that hangs when collectives connect at init (NCCL < 2.22,
/// NCCL_RUNTIME_CONNECT=0) was reported clean. Both platforms are explored now, and the finding says which one it
/// needs, in text and JSON; every strategy finds it and its witness replays.
#[test]
fn a_hang_with_collective_connections_at_init_was_reported_clean() {
    use cuorder_model::profile::{CollectiveConnect, ConnectChoice, Profile};
    let file = "examples/cudafree-collective-connect-at-init.ron";
    let (r, _) = common::check_file(file, "portable");
    let text = r.to_text();
    assert_eq!(kinds(&r), vec!["deadlock sometimes"], "{text}");
    assert_eq!(r.findings[0].finding.platform, Some(ConnectChoice::Init));
    assert!(text.contains("platform: only in executions with collective connections made at init (NCCL < 2.22"), "{text}");
    // The first fix named the collective-order rule, not the cudaFree that blocks where the author did not expect
    // it (issue 30's note, item 5).
    let first_fix = text.lines().find(|l| l.trim_start().starts_with("fix:")).unwrap_or("");
    assert!(first_fix.contains("do not call cudaFree"), "the first fix is not the cudaFree one: {text}");
    let json = cuorder::json::check(&cuorder_model::semantics::Semantics::new(&load(file), &Profile::portable()), &r, file);
    let f = &json.check.expect("a check object").findings[0];
    assert_eq!(f.platform.as_deref(), Some("init"));
    assert!(f.rules.contains(&"N7".to_string()) && f.rules.contains(&"S7".to_string()), "{:?}", f.rules);
    // The witness replays, and it is an execution of the platform that connects at init.
    let (p, portable) = (load(file), Profile::portable());
    let sem = cuorder_model::semantics::Semantics::new(&p, &portable);
    let end = cuorder_sim::run::replay_state(&sem, &r.findings[0].finding.witness).expect("the witness replays");
    assert_eq!(end.nccl.coll_connect, Some(ConnectChoice::Init));
    // Each platform alone: connected at init, the hang (and no platform line: the profile fixes the choice);
    // connected lazily, the set-up rendezvous keeps the all-reduce from being enqueued before cudaFree: clean.
    for (choice, expect) in [(CollectiveConnect::Init, vec!["deadlock sometimes"]), (CollectiveConnect::Lazy, vec![])] {
        let prof = Profile { collective_connect: Some(choice), ..Profile::portable() };
        let r = cuorder::report::check(&p, &prof, &Default::default());
        assert_eq!(kinds(&r), expect, "{choice:?}");
        assert!(r.findings.iter().all(|f| f.finding.platform.is_none()));
    }
    // Sampled and DPOR searches walk the same steps: they find it too, saying the same.
    let dpor = cuorder_sim::dpor::explore_dpor(&sem, &Default::default());
    assert_eq!(dpor.exploration.findings.iter().map(|f| f.platform).collect::<Vec<_>>(), vec![Some(ConnectChoice::Init)]);
}

fn load(file: &str) -> cuorder_model::program::Program {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    cuorder_model::format::load(file, &std::fs::read_to_string(root.join(file)).unwrap()).unwrap()
}

#[test]
fn n7_nonmirrored_first_contact_can_be_undefined() {
    use cuorder_model::profile::{NonMirrored, Profile};
    let t = gpu2(AB, "", r#"Buffer("x", "1 KiB"), Buffer("y", "1 KiB")"#,
        r#"Send(to: Next, buf: "x", stream: "sA"), Recv(from: Prev, buf: "y", stream: "sA"), StreamSync("sA")"#);
    let p = cuorder_model::format::load("N7u", &t).unwrap();
    let prof = Profile { nonmirrored_first_contact: NonMirrored::Undefined, ..Profile::eager() };
    let r = cuorder::report::check(&p, &prof, &Default::default());
    assert_eq!(kinds(&r), vec!["undefined always"]);
    assert!(r.findings[0].text.contains("rule N7"));
}

#[test]
fn n8_comm_init_blocks_until_every_member_calls_it() {
    let t = r#"Program(ranks: 2, comms: [Comm("c", init: Explicit)], threads: [Thread("main", [OnRanks([0], [CommInit("c")])])])"#;
    let r = check_text("N8", t, "portable");
    assert_eq!(kinds(&r), vec!["deadlock always"]);
    assert!(r.findings[0].text.contains("never calls comm_init"), "{}", r.findings[0].text);
    let ok = r#"Program(ranks: 2, comms: [Comm("c", init: Explicit)], threads: [Thread("main", [CommInit("c")])])"#;
    assert_eq!(verdict("N8ok", ok, "portable"), Vec::<String>::new());
}

#[test]
fn n10_event_recorded_inside_a_group_orders_nothing() {
    let (r, _) = common::check_file("examples/megatron-batch-p2p-race.ron", "portable");
    assert!(r.findings.iter().all(|f| f.kind == "data race"), "{:?}", common::kinds(&r));
    assert!(r.findings.iter().any(|f| f.text.contains("N10")), "{}", r.to_text());
}

#[test]
fn c1_collective_completes_only_when_every_member_runs_its_part() {
    // Rank 1 synchronizes its stream before issuing its all-reduce part, rank 0 after: fine. But if rank 0 waits
    // on the host for its part before rank 1 issues its part behind a barrier, it hangs.
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("g", "1 MiB")], comms: [Comm("world")],
        threads: [Thread("main", [
            OnRanks([0], [AllReduce(buf: "g", stream: "s0"), StreamSync("s0"), Barrier("b")]),
            OnRanks([1], [Barrier("b"), AllReduce(buf: "g", stream: "s0"), StreamSync("s0")])])])"#;
    assert_eq!(verdict("C1", t, "eager"), vec!["deadlock always"]);
}

/// Also the regression test for "a freed buffer's pending send lost its memory": items used to look up a pooled
/// buffer's block when they *started*, so a send issued before `Free` but started after it accessed nothing and
/// the reuse race was missed (exposed by partial-order reduction running the host ahead). Items now keep the block
/// they were issued on.
#[test]
fn p4_freed_block_reused_while_a_send_reads_it() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking), Stream("sN", NonBlocking)], events: ["e"],
        buffers: [Pooled("out", "256 MiB"), Pooled("tmp", "256 MiB"), Buffer("in", "256 MiB")], comms: [Comm("world")],
        threads: [Thread("main", [
            OnRanks([0], [Alloc("out", stream: "s0"), Kernel("fwd", stream: "s0", writes: ["out"]),
                Record("e", stream: "s0"), Wait("e", stream: "sN"), Send(to: Rank(1), buf: "out", stream: "sN"),
                Free("out"), Alloc("tmp", stream: "s0"), Kernel("next", stream: "s0", writes: ["tmp"]), DeviceSync]),
            OnRanks([1], [Recv(from: Rank(0), buf: "in", stream: "sN"), StreamSync("sN")])])])"#;
    let r = check_text("P4", t, "portable");
    assert_eq!(kinds(&r), vec!["data race sometimes"]);
    assert!(r.findings[0].text.contains("caching allocator"), "{}", r.findings[0].text);
    // record_stream keeps the block out of the pool until the send has ended.
    let fixed = t.replace(r#"Free("out")"#, r#"RecordStream("out", stream: "sN"), Free("out")"#);
    assert_eq!(verdict("P4fixed", &fixed, "portable"), Vec::<String>::new());
}

/// Regression: two ops of one NCCL group used to be exempt from race detection because a group is one launch.
/// The parts of a group progress independently (N4), so a send and a recv of one buffer in one group race.
#[test]
fn n4_ops_of_one_group_race_on_a_shared_buffer() {
    let t = gpu2(AB, "", r#"Buffer("g", "1 MiB")"#,
        r#"Group([Send(to: Next, buf: "g", stream: "sA"), Recv(from: Prev, buf: "g", stream: "sA")]), StreamSync("sA")"#);
    assert_eq!(verdict("N4race", &t, "portable"), vec!["data race always", "data race always"]);
}

/// S5 per CUDA's "API synchronization behavior": a synchronous device-to-device cudaMemcpy does not wait on the
/// host, so a kernel on a non-blocking stream may read the destination before the copy; a synchronous memset of
/// pinned memory is fully synchronous.
#[test]
fn s5_synchronous_copy_and_memset_block_only_where_documented() {
    let t = gpu1(AB, "", BUFS, r#"Memcpy(dst: "b", src: "a"), Kernel("r", stream: "sA", reads: ["b"])"#);
    assert_eq!(verdict("S5d2d", &t, "portable"), vec!["data race always"]);
    let t = gpu1(AB, "", BUFS, r#"Memset("p"), HostRead("p")"#);
    assert_eq!(verdict("S5memset", &t, "portable"), Vec::<String>::new());
}

/// NCCL docs, "Thread safety": two host threads issuing on one communicator with nothing ordering them is undefined.
#[test]
fn nccl_one_communicator_from_two_threads_is_undefined() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking), Stream("s1", NonBlocking)],
        buffers: [Buffer("a", "1 MiB"), Buffer("b", "1 MiB")], comms: [Comm("world")],
        threads: [Thread("t1", [AllReduce(buf: "a", stream: "s0"), StreamSync("s0")]),
                  Thread("t2", [AllReduce(buf: "b", stream: "s1"), StreamSync("s1")])])"#;
    let r = check_text("threads", t, "portable");
    assert!(kinds(&r).iter().all(|k| k.starts_with("undefined")), "{:?}", kinds(&r));
    assert!(r.to_text().contains("two host threads"), "{}", r.to_text());
    // Ordered by a barrier, the same calls are fine.
    let ordered = t.replace(r#"Thread("t2", [AllReduce"#, r#"Thread("t2", [Barrier("b"), AllReduce"#)
        .replace(r#"[AllReduce(buf: "a", stream: "s0"), StreamSync("s0")]"#, r#"[AllReduce(buf: "a", stream: "s0"), StreamSync("s0"), Barrier("b")]"#);
    assert_eq!(verdict("threads-ordered", &ordered, "portable"), Vec::<String>::new());
}

#[test]
fn v1_a_read_ordered_after_its_writer_sees_it() {
    let t = gpu1(
        AB,
        "\"e\"",
        BUFS,
        r#"Kernel("W", stream: "sA", writes: ["a"]), Record("e", stream: "sA"), Wait("e", stream: "sB"),
           Expect("a", written_by: Kernel("W"), stream: "sB"), StreamSync("sB")"#,
    );
    assert_eq!(verdict("V1-ordered", &t, "portable"), Vec::<String>::new());
}

#[test]
fn v1_an_unordered_read_is_stale_as_well_as_racy() {
    // L2 with an assertion: nothing orders the write before the read, so it may see the old value.
    let t = gpu1(AB, "", BUFS, r#"Kernel("W", stream: "sA", writes: ["a"]), Expect("a", written_by: Kernel("W"), stream: "sB")"#);
    assert_eq!(verdict("V1-unordered", &t, "portable"), vec!["data race always", "stale read always"]);
    // On the host: an async copy into pinned memory, read without a synchronize (S4), then with one.
    let host = |sync: &str| {
        gpu1(AB, "", BUFS, &format!(r#"Memcpy(dst: "p", src: "a", stream: "sA"), {sync} Expect("p", written_by: Memcpy)"#))
    };
    assert_eq!(verdict("V1-host", &host(""), "portable"), vec!["stale read always", "data race always"]);
    assert_eq!(verdict("V1-host-sync", &host(r#"StreamSync("sA"),"#), "portable"), Vec::<String>::new());
}

#[test]
fn v1_a_read_that_comes_before_its_writer_is_stale_without_any_race() {
    // Rank 0's writer W is queued behind a recv whose send rank 1 issues only after the barrier, which rank 0's host
    // reaches after its read: the read happens before the write. No two accesses are unordered (the recv's end joins
    // the send's start, which follows the barrier), so only the assertion can say that the read saw the old value.
    let t = r#"Program(ranks: 2, streams: [Stream("sB", NonBlocking)],
        buffers: [Buffer("p", "4 KiB", space: PinnedHost), Buffer("z", "4 KiB"), Buffer("w", "4 KiB"), Buffer("w2", "4 KiB")],
        comms: [Comm("world")],
        threads: [Thread("main", [
            Group([Send(to: Next, buf: "w", stream: "sB"), Recv(from: Prev, buf: "w2", stream: "sB")]),
            StreamSync("sB"),
            If(rank == 0, then: [
                Recv(from: Rank(1), buf: "z", stream: "sB"),
                Kernel("W", stream: "sB", writes: ["p"]),
                Expect("p", written_by: Kernel("W")),
                Barrier("b"),
            ], else: [
                Barrier("b"),
                Send(to: Rank(0), buf: "z", stream: "sB"),
            ]),
            StreamSync("sB"),
        ])])"#;
    let r = check_text("V1-before", t, "portable");
    assert_eq!(kinds(&r), vec!["stale read always"], "{}", r.to_text());
    let text = r.to_text();
    assert!(text.contains("the read does not see the value it expects (V1)"), "{text}");
    assert!(text.contains("expects what r0 main #6 kernel W(sB, W: p)"), "{text}");
}

#[test]
fn v1_writers_are_named_by_kind_and_checked_at_load() {
    let load = |ops: &str| cuorder_model::format::load("t", &gpu1(AB, "", BUFS, ops));
    let e = load(r#"Kernel("W", stream: "sA", writes: ["a"]), Expect("a", written_by: Kernel("V"), stream: "sA")"#).unwrap_err();
    assert!(e[0].message.contains("no earlier op of this thread is a Kernel(\"V\") that writes `a`"), "{e:?}");
    let e = load(
        r#"Kernel("W", stream: "sA", writes: ["a"]), Memset("a", stream: "sA"), Expect("a", written_by: Kernel("W"), stream: "sA")"#,
    )
    .unwrap_err();
    assert!(e[0].message.contains("`a` is written again after the Kernel(\"W\") it expects"), "{e:?}");
    assert_eq!(e[0].related[0].message, "written again here");
    let e = load(r#"Kernel("W", stream: "sA", writes: ["a"]), Expect("a", written_by: Kernel("W"))"#).unwrap_err();
    assert!(e[0].message.contains("an Expect without a stream reads `a` on the host, but it is device memory"), "{e:?}");
    // The writer is the last matching op: a loop's Expect names the same iteration's kernel.
    let p = load(
        r#"For(i, 0..2, [Kernel("W", stream: "sA", writes: ["a"]), Expect("a", written_by: Kernel("W"), stream: "sA")])"#,
    )
    .unwrap();
    let writers: Vec<u32> = p.ranks[0].threads[0]
        .ops
        .iter()
        .filter_map(|o| match o.kind {
            cuorder_model::program::OpKind::Expect { writer, .. } => Some(writer),
            _ => None,
        })
        .collect();
    assert_eq!(writers, [0, 2]);
}

#[test]
fn p4_process_group_nccl_records_its_tensors_on_the_nccl_stream() {
    // Megatron-LM issue 4047's shape in the PyTorch dialect: an isend's tensor is deleted before the send is waited
    // for, and a new tensor reuses its block. ProcessGroupNCCL recorded the tensor on its NCCL stream (record_stream),
    // so the block is not handed out before the send has ended: no race. The same ops written by hand without the
    // record_stream race (the reuse writes while the send may still read).
    let torch = |body: &str| {
        format!(
            r#"Program(ranks: 2, torch: Torch(init: Eager), buffers: [Pooled("t", "1 MiB"), Pooled("u", "1 MiB"), Buffer("r", "1 MiB")],
               threads: [Thread("main", [InitProcessGroup, {body}, CudaSynchronize])])"#
        )
    };
    let t = torch(
        r#"If(rank == 0, then: [Empty("t"), Compute("fill", writes: ["t"]), Isend("t", dst: Rank(1), work: "w"), Del("t"),
                               Empty("u"), Compute("reuse", writes: ["u"]), WorkWait("w")],
                     else: [DistRecv("r", src: Rank(0))])"#,
    );
    assert_eq!(verdict("P4-torch", &t, "portable"), Vec::<String>::new());
    let program = cuorder_model::format::load("P4-torch", &t).unwrap();
    assert!(program.ranks[0].threads[0].ops.iter().any(|o| matches!(o.kind, cuorder_model::program::OpKind::RecordStream { .. })));
    let by_hand = r#"Program(ranks: 2, streams: [Stream("nccl", NonBlocking)], buffers: [Pooled("t", "1 MiB"), Pooled("u", "1 MiB"), Buffer("r", "1 MiB")],
        comms: [Comm("world")],
        threads: [Thread("main", [
            If(rank == 0, then: [Alloc("t", stream: "sL"), Kernel("fill", stream: "sL", writes: ["t"]), Send(to: Rank(1), buf: "t", stream: "nccl"),
                                 Free("t"), Alloc("u", stream: "sL"), Kernel("reuse", stream: "sL", writes: ["u"])],
                          else: [Recv(from: Rank(0), buf: "r", stream: "nccl")]),
            DeviceSync])])"#;
    assert!(verdict("P4-by-hand", by_hand, "portable").contains(&"data race sometimes".to_string()));
}

/// Checks `text` under `portable` changed by `f` (S6, S7 knobs are not in the built-in profiles).
fn verdict_with(name: &str, text: &str, f: impl FnOnce(&mut cuorder_model::profile::Profile)) -> cuorder::report::Report {
    let p = cuorder_model::format::load(name, text).unwrap_or_else(|d| panic!("{name}: {d:?}"));
    let mut prof = cuorder_model::profile::Profile::portable();
    f(&mut prof);
    cuorder::report::check(&p, &prof, &Default::default())
}

/// Rank 0 posts a recv on sA, then does `middle` before a host barrier; rank 1 sends only after the barrier. The
/// connection is warmed up first (N7), so that only `middle` can hang the exchange.
fn recv_then_barrier(middle: &str) -> String {
    format!(
        r#"Program(ranks: 2, streams: [Stream("sA", NonBlocking), Stream("sB", NonBlocking)],
        buffers: [Buffer("a", "1 MiB"), Buffer("w", "1 MiB"), Buffer("b", "1 MiB"), Buffer("p", "1 MiB", space: PinnedHost), Pooled("out", "1 MiB")],
        comms: [Comm("world")],
        threads: [Thread("main", [
            Group([Send(to: Next, buf: "a", stream: "sA"), Recv(from: Prev, buf: "w", stream: "sA")]),
            DeviceSync,
            OnRanks([0], [Recv(from: Rank(1), buf: "a", stream: "sA"), {middle} Barrier("step")]),
            OnRanks([1], [Barrier("step"), Send(to: Rank(0), buf: "a", stream: "sA")]),
            DeviceSync,
        ])])"#
    )
}

#[test]
fn s6_a_full_launch_queue_blocks_the_host_behind_a_spinning_recv() {
    let t = recv_then_barrier(r#"Repeat(3, [Kernel("k", stream: "sA", writes: ["b"])]),"#);
    // Unbounded (portable): the host reaches the barrier whatever the device does.
    assert_eq!(kinds(&verdict_with("s6", &t, |_| {})), Vec::<String>::new());
    // Two launches that have not started fill the queue: the third blocks the host behind the recv.
    let full = verdict_with("s6", &t, |p| p.launch_queue_depth = Some(2));
    assert_eq!(kinds(&full), vec!["deadlock always"], "{}", full.to_text());
    let text = full.to_text();
    assert!(text.contains("S6: a full launch queue blocks the call"), "{text}");
    assert!(text.contains("waiting for room in the launch queue of sA (S6)"), "{text}");
    assert!(full.findings[0].text.contains("is queued behind"), "{text}");
    // A queue that holds all three: no hang.
    assert_eq!(kinds(&verdict_with("s6", &t, |p| p.launch_queue_depth = Some(3))), Vec::<String>::new());
    // Kernels on another stream may start beside the recv when streams progress independently (S1).
    let other = recv_then_barrier(r#"Repeat(3, [Kernel("k", stream: "sB", writes: ["b"])]),"#);
    let r = verdict_with("s6b", &other, |p| {
        p.launch_queue_depth = Some(2);
        p.independent_progress = true;
    });
    assert_eq!(kinds(&r), Vec::<String>::new(), "{}", r.to_text());
}

#[test]
fn s7_cudafree_may_synchronize_the_device_and_hang_behind_a_recv() {
    let t = recv_then_barrier(r#"Free("b"),"#);
    let r = verdict_with("s7-free", &t, |_| {});
    assert_eq!(kinds(&r), vec!["deadlock sometimes"], "{}", r.to_text());
    assert!(r.to_text().contains("cuda_free(b)"), "{}", r.to_text());
    assert!(r.to_text().contains("S7: the call synchronizes the device implicitly"), "{}", r.to_text());
    use cuorder_model::profile::{ImplicitSync, SyncScope};
    let always = ImplicitSync { guaranteed: SyncScope::Device, possible: SyncScope::Device };
    assert_eq!(kinds(&verdict_with("s7-free", &t, |p| p.implicit_sync.free = always)), vec!["deadlock always"]);
    let never = ImplicitSync { guaranteed: SyncScope::None, possible: SyncScope::None };
    assert_eq!(kinds(&verdict_with("s7-free", &t, |p| p.implicit_sync.free = never)), Vec::<String>::new());
}

#[test]
fn s7_malloc_malloc_host_and_the_first_lazy_load_may_synchronize() {
    for middle in [r#"Malloc("64 MiB"),"#, r#"MallocHost("4 MiB"),"#, r#"LoadModule("attn"),"#] {
        let r = verdict_with("s7-alloc", &recv_then_barrier(middle), |_| {});
        assert_eq!(kinds(&r), vec!["deadlock sometimes"], "{middle}: {}", r.to_text());
    }
    // Only the first load of a module on a device synchronizes: loaded before the recv, the second load is free.
    let t = recv_then_barrier(r#"LoadModule("attn"),"#).replace("OnRanks([0], [Recv", "OnRanks([0], [LoadModule(\"attn\"), Recv");
    assert_eq!(kinds(&verdict_with("s7-lazy", &t, |_| {})), Vec::<String>::new());
    // Each knob is its own: a profile where only cudaMalloc never synchronizes.
    use cuorder_model::profile::{ImplicitSync, SyncScope};
    let never = ImplicitSync { guaranteed: SyncScope::None, possible: SyncScope::None };
    let t = recv_then_barrier(r#"Malloc("64 MiB"),"#);
    assert_eq!(kinds(&verdict_with("s7-malloc", &t, |p| p.implicit_sync.malloc = never)), Vec::<String>::new());
    let t = recv_then_barrier(r#"MallocHost("64 MiB"),"#);
    assert_eq!(kinds(&verdict_with("s7-malloc", &t, |p| p.implicit_sync.malloc = never)), vec!["deadlock sometimes"]);
}

#[test]
fn s7_all_devices_scope_waits_for_other_ranks_work() {
    // Rank 1 spins in a recv whose send rank 0 issues after its cudaMalloc: only a synchronization of every device
    // (one process driving both GPUs) waits for rank 1's recv.
    let t = r#"Program(ranks: 2, streams: [Stream("sA", NonBlocking)], buffers: [Buffer("a", "1 MiB"), Buffer("w", "1 MiB")],
        comms: [Comm("world")],
        threads: [Thread("main", [
            Group([Send(to: Next, buf: "a", stream: "sA"), Recv(from: Prev, buf: "w", stream: "sA")]),
            DeviceSync,
            Barrier("warm"),
            OnRanks([1], [Recv(from: Rank(0), buf: "a", stream: "sA")]),
            Barrier("posted"),
            OnRanks([0], [Malloc("1 GiB"), Send(to: Rank(1), buf: "a", stream: "sA")]),
            DeviceSync,
        ])])"#;
    use cuorder_model::profile::{ImplicitSync, SyncScope};
    assert_eq!(kinds(&verdict_with("s7-all", t, |_| {})), Vec::<String>::new());
    let all = ImplicitSync { guaranteed: SyncScope::None, possible: SyncScope::AllDevices };
    assert_eq!(kinds(&verdict_with("s7-all", t, |p| p.implicit_sync.malloc = all)), vec!["deadlock sometimes"]);
}

#[test]
fn s7_cudafree_of_memory_in_use_is_a_use_after_free() {
    let t = gpu1(AB, "", BUFS, r#"Kernel("w", stream: "sA", writes: ["a"]), Free("a")"#);
    let r = verdict_with("s7-uaf", &t, |_| {});
    assert_eq!(kinds(&r), vec!["undefined sometimes"], "{}", r.to_text());
    assert!(r.to_text().contains("rule S7 broken"), "{}", r.to_text());
    assert!(r.to_text().contains("a use after free"), "{}", r.to_text());
    // A free that is guaranteed to synchronize the device waits for the kernel first.
    use cuorder_model::profile::{ImplicitSync, SyncScope};
    let sync = ImplicitSync { guaranteed: SyncScope::Device, possible: SyncScope::Device };
    assert_eq!(kinds(&verdict_with("s7-uaf", &t, |p| p.implicit_sync.free = sync)), Vec::<String>::new());
    // So does an explicit synchronization.
    let synced = gpu1(AB, "", BUFS, r#"Kernel("w", stream: "sA", writes: ["a"]), StreamSync("sA"), Free("a")"#);
    assert_eq!(verdict("s7-synced", &synced, "portable"), Vec::<String>::new());
    // Any use after the free, and a second free, are undefined.
    let later = gpu1(AB, "", BUFS, r#"Free("a"), Kernel("r", stream: "sA", reads: ["a"])"#);
    assert_eq!(verdict("s7-later", &later, "portable"), vec!["undefined always"]);
    let twice = gpu1(AB, "", BUFS, r#"Free("a"), Free("a")"#);
    assert_eq!(verdict("s7-twice", &twice, "portable"), vec!["undefined always"]);
}

#[test]
fn s7_cuda_launch_blocking_makes_launches_synchronous() {
    // A kernel writes pinned memory that the host then reads: a race, unless every launch returns once it ended.
    let t = gpu1(AB, "", BUFS, r#"Kernel("w", stream: "sA", writes: ["p"]), HostRead("p")"#);
    assert_eq!(verdict("s7-lb", &t, "portable"), vec!["data race always"]);
    assert_eq!(kinds(&verdict_with("s7-lb", &t, |p| p.launch_blocking = true)), Vec::<String>::new());
    // An NCCL send launched blocking waits for its recv, which rank 1 posts only after the barrier (NVIDIA/nccl
    // issue 750). Under `portable` the send may finish eagerly, so the hang is "sometimes".
    let t = r#"Program(ranks: 2, streams: [Stream("sA", NonBlocking)], buffers: [Buffer("a", "1 MiB"), Buffer("w", "1 MiB")],
        comms: [Comm("world")],
        threads: [Thread("main", [
            Group([Send(to: Next, buf: "a", stream: "sA"), Recv(from: Prev, buf: "w", stream: "sA")]),
            DeviceSync,
            OnRanks([0], [Send(to: Rank(1), buf: "a", stream: "sA"), Barrier("step")]),
            OnRanks([1], [Barrier("step"), Recv(from: Rank(0), buf: "a", stream: "sA")]),
            DeviceSync,
        ])])"#;
    assert_eq!(kinds(&verdict_with("s7-nccl", t, |_| {})), Vec::<String>::new());
    let r = verdict_with("s7-nccl", t, |p| p.launch_blocking = true);
    assert_eq!(kinds(&r), vec!["deadlock sometimes"], "{}", r.to_text());
    assert!(r.to_text().contains("with CUDA_LAUNCH_BLOCKING=1 a launch returns once its work has ended"), "{}", r.to_text());
    assert!(r.to_text().contains("fix: CUDA_LAUNCH_BLOCKING=1 makes every NCCL launch wait for its peers"), "{}", r.to_text());
}

/// Issue 30 item 5: with CUDA_LAUNCH_BLOCKING=1 one thread driving two GPUs groups a send on GPU 0 with its recv on
/// GPU 1. NCCL launches the group's kernels one device after another and the first launch blocks until its kernel
/// ends, which needs the second (NVIDIA/nccl PR 774, "When managing multiple devices per OS thread ... we
/// deadlock"). The model issued both launches at once and reported no problem.
#[test]
fn launch_blocking_across_two_gpus_of_one_thread_did_not_hang() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "64 MiB"), Buffer("y", "64 MiB")],
        comms: [Comm("world")],
        threads: [Thread("main", ranks: [0], ops: [
            Group([Send(to: Rank(1), buf: "x", stream: "s0"), Recv(from: Rank(0), buf: "y@1", stream: "s0@1")]),
            StreamSync("s0@1"),
        ])])"#;
    let eager = |lb: bool| {
        move |p: &mut cuorder_model::profile::Profile| {
            *p = cuorder_model::profile::Profile { launch_blocking: lb, ..cuorder_model::profile::Profile::eager() }
        }
    };
    assert_eq!(kinds(&verdict_with("lb-2gpu", t, eager(false))), Vec::<String>::new());
    // 64 MiB is beyond `eager`'s window: the send waits for the recv, never launched.
    let r = verdict_with("lb-2gpu", t, eager(true));
    assert_eq!(kinds(&r), vec!["deadlock always"], "{}", r.to_text());
    assert!(r.to_text().contains("NCCL launches a group's kernels one after another"), "{}", r.to_text());
    // Under `portable` the send may finish eagerly, so the hang is "sometimes".
    let r = verdict_with("lb-2gpu", t, |p| p.launch_blocking = true);
    assert_eq!(kinds(&r), vec!["deadlock sometimes"], "{}", r.to_text());
    // One GPU per process: each rank's group is one launch, which does not wait for another of its own.
    let spmd = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "64 MiB"), Buffer("y", "64 MiB")],
        comms: [Comm("world")],
        threads: [Thread("main", [
            Group([Send(to: Next, buf: "x", stream: "s0"), Recv(from: Prev, buf: "y", stream: "s0")]),
            StreamSync("s0"),
        ])])"#;
    assert_eq!(kinds(&verdict_with("lb-spmd", spmd, eager(true))), Vec::<String>::new());
}

#[test]
fn s8_a_host_function_is_ordered_like_a_kernel_on_its_stream() {
    let same = gpu1(AB, "", BUFS, r#"Kernel("w", stream: "sA", writes: ["a"]), Memcpy(dst: "p", src: "a", stream: "sA"), HostFunc("cb", stream: "sA", reads: ["p"])"#);
    assert_eq!(verdict("s8-same", &same, "portable"), Vec::<String>::new());
    let other = gpu1(AB, "", BUFS, r#"Memcpy(dst: "p", src: "a", stream: "sA"), HostFunc("cb", stream: "sB", reads: ["p"])"#);
    assert_eq!(verdict("s8-other", &other, "portable"), vec!["data race always"]);
    // What it writes, the host may read only once the function is known to have run.
    let host = gpu1(AB, "", BUFS, r#"HostFunc("cb", stream: "sA", writes: ["p"]), HostRead("p")"#);
    assert_eq!(verdict("s8-host", &host, "portable"), vec!["data race always"]);
    let synced = gpu1(AB, "", BUFS, r#"HostFunc("cb", stream: "sA", writes: ["p"]), StreamSync("sA"), HostRead("p")"#);
    assert_eq!(verdict("s8-synced", &synced, "portable"), Vec::<String>::new());
    // Work after it on its stream waits for it.
    let after = gpu1(AB, "", BUFS, r#"HostFunc("cb", stream: "sA", writes: ["p"]), Kernel("r", stream: "sA", reads: ["p"])"#);
    assert_eq!(verdict("s8-after", &after, "portable"), Vec::<String>::new());
}

#[test]
fn s8_a_host_function_that_calls_cuda_is_undefined() {
    let t = gpu1(AB, "", BUFS, r#"HostFunc("cb", stream: "sA", calls_cuda: true), StreamSync("sA")"#);
    let r = check_text("s8-cuda", &t, "portable");
    assert_eq!(kinds(&r), vec!["undefined always"]);
    assert!(r.to_text().contains("rule S8 broken"), "{}", r.to_text());
    assert!(r.to_text().contains("must not make any CUDA call"), "{}", r.to_text());
}

#[test]
fn s7_p4_empty_cache_waits_for_record_stream_events_and_may_synchronize() {
    use cuorder_model::profile::{ImplicitSync, SyncScope};
    let never = ImplicitSync { guaranteed: SyncScope::None, possible: SyncScope::None };
    let always = ImplicitSync { guaranteed: SyncScope::Device, possible: SyncScope::Device };
    let cached = r#"Alloc("out", stream: "sB"), Kernel("k", stream: "sB", writes: ["out"]), Free("out"), EmptyCache,"#;
    // A cached block: releasing it is a cudaFree, which may synchronize the device (and so wait for the recv).
    let t = recv_then_barrier(cached);
    let r = verdict_with("p4-empty", &t, |_| {});
    // The same cycle is also reported as a stuck state in which the device withholds the kernel on sB (S1).
    let k = kinds(&r);
    assert!(!k.is_empty() && k.iter().all(|k| k == "deadlock sometimes"), "{}", r.to_text());
    assert!(r.to_text().contains("empty_cache"), "{}", r.to_text());
    assert_eq!(kinds(&verdict_with("p4-empty", &t, |p| p.implicit_sync.free = never)), Vec::<String>::new());
    // Recorded on the recv's stream (record_stream), the block's event is synchronized first: a hang whatever
    // cudaFree does.
    let held = r#"Alloc("out", stream: "sB"), Kernel("k", stream: "sB", writes: ["out"]), RecordStream("out", stream: "sA"), Free("out"), EmptyCache,"#;
    let r = verdict_with("p4-held", &recv_then_barrier(held), |p| p.implicit_sync.free = never);
    let k = kinds(&r);
    assert!(!k.is_empty() && k.iter().all(|k| k == "deadlock always"), "{}", r.to_text());
    assert!(r.to_text().contains("r0 main is blocked in #10 empty_cache"), "{}", r.to_text());
    // Nothing cached: no cudaFree, no synchronization.
    let none = recv_then_barrier(r#"Alloc("out", stream: "sB"), EmptyCache,"#);
    assert_eq!(kinds(&verdict_with("p4-none", &none, |p| p.implicit_sync.free = always)), Vec::<String>::new());
    // A released block is never handed out again: the next Alloc takes a fresh block, so a use of the old
    // allocation that is still running cannot alias it.
    let reuse = gpu1(AB, "", &format!("{BUFS}, Pooled(\"t1\", \"1 MiB\"), Pooled(\"t2\", \"1 MiB\")"),
        r#"Alloc("t1", stream: "sA"), Kernel("w", stream: "sB", writes: ["t1"]), Free("t1"), Alloc("t2", stream: "sA"), Kernel("r", stream: "sA", writes: ["t2"])"#);
    assert_eq!(verdict("p4-reuse", &reuse, "portable"), vec!["data race sometimes"]);
    let emptied = reuse.replace(r#"Free("t1"), "#, r#"Free("t1"), EmptyCache, "#);
    let r = verdict_with("p4-emptied", &emptied, |p| p.implicit_sync.free = always);
    assert_eq!(kinds(&r), Vec::<String>::new(), "{}", r.to_text());
}

/// Issue 30 item 5: a received message asserted to come from a given send (`written_by: Send("x@0")`, V1 with N3).
/// Rank 0 sends `first` then `second` to rank 1, which receives into `y` then `z`.
fn v1_sent_from(expect: &str) -> String {
    format!(
        r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)],
        buffers: [Buffer("first", "4 KiB"), Buffer("second", "4 KiB"), Buffer("y", "4 KiB"), Buffer("z", "4 KiB")],
        comms: [Comm("world")],
        threads: [Thread("main", [
            If(rank == 0, then: [
                Kernel("fill", stream: "s0", writes: ["first", "second"]),
                Group([Send(to: Rank(1), buf: "first", stream: "s0"), Send(to: Rank(1), buf: "second", stream: "s0")]),
            ], else: [
                Group([Recv(from: Rank(0), buf: "y", stream: "s0"), Recv(from: Rank(0), buf: "z", stream: "s0")]),
                {expect}
            ]),
            StreamSync("s0"),
        ])])"#
    )
}

#[test]
fn v1_expect_written_by_send_of_another_rank_holds_for_the_matching_send() {
    let t = v1_sent_from(r#"Expect("y", written_by: Send("first@0"), stream: "s0"), Expect(Slice("z", 0, "1 KiB"), written_by: Send(Slice("second@0", 0, "4 KiB")), stream: "s0"),"#);
    let r = check_text("V1-sent-from", &t, "portable");
    assert_eq!(kinds(&r), Vec::<String>::new(), "{}", r.to_text());
}

#[test]
fn v1_expect_written_by_send_of_another_rank_is_stale_when_the_recv_matched_another_send() {
    // N3 is positional: y (the first recv) gets `first`, not `second`, whatever the names say.
    let t = v1_sent_from(r#"Expect("y", written_by: Send("second@0"), stream: "s0"),"#);
    let r = check_text("V1-sent-from-other", &t, "portable");
    assert_eq!(kinds(&r), vec!["stale read always"], "{}", r.to_text());
    let text = r.to_text();
    assert!(text.contains("expects what r1 main #1 recv(from r0, y"), "{text}");
    assert!(text.contains("but that recv matched r0 main #2 send(to r1, first"), "{text}");
}

#[test]
fn v1_expect_written_by_send_is_stale_when_the_recv_does_not_happen_before_the_read() {
    // The right send, but the read is on another stream that nothing orders after the recv.
    let t = v1_sent_from(r#"Expect("y", written_by: Send("first@0"), stream: "sL"),"#);
    assert_eq!(verdict("V1-sent-from-unordered", &t, "portable"), vec!["data race always", "stale read always"]);
}

#[test]
fn v1_expect_written_by_send_is_checked_at_load() {
    let load = |e: &str| cuorder_model::format::load("t", &v1_sent_from(e));
    let e = load(r#"Expect("y", written_by: Send("first@1"), stream: "s0"),"#).unwrap_err();
    assert!(e[0].message.contains("`first@1` is a buffer of rank 1, but the Recv that writes `y` receives from rank 0 (N3)"), "{e:?}");
    assert_eq!((e[0].line, e[0].column), (10, 46), "{e:?}");
    let e = load(r#"Expect("y", written_by: Send("nope@0"), stream: "s0"),"#).unwrap_err();
    assert!(e[0].message.contains("nope"), "{e:?}");
    let e = load(r#"Kernel("k", stream: "s0", writes: ["y"]), Expect("y", written_by: Send("first@0"), stream: "s0"),"#).unwrap_err();
    assert!(e[0].message.contains("`y` is written again after the Recv of what Send(\"first@0\") sent it expects"), "{e:?}");
}

/// Issue 30 item 5: a thread of a one-process program freeing another GPU's buffer (`Free("x@1")` from rank 0) was
/// refused at load. Which device cudaFree synchronizes then, the pointer's or the calling thread's, is documented
/// nowhere, so a `Device` scope explores both (S7).
fn free_of_another_gpu(before_free: &str) -> String {
    format!(
        r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB"), Buffer("a", "1 MiB")],
        threads: [Thread("driver", ranks: [0], ops: [
            Kernel("k", stream: "s0@1", writes: ["x@1"]),
            {before_free}
            Free("x@1"),
            Kernel("after", stream: "s0", writes: ["a"]),
            DeviceSync,
        ])])"#
    )
}

#[test]
fn s7_cudafree_of_another_gpus_buffer_loads_and_may_sync_either_device() {
    use cuorder_model::profile::{ImplicitSync, SyncScope};
    // Portable: the free may wait for nothing, or for either device; waiting for rank 0's device leaves k running.
    let t = free_of_another_gpu("");
    let r = verdict_with("s7-free-peer", &t, |_| {});
    assert_eq!(kinds(&r), vec!["undefined sometimes"], "{}", r.to_text());
    assert!(r.to_text().contains("r0 driver #1 cuda_free(x@1) releases x while r1 s0@1: #0 kernel k"), "{}", r.to_text());
    // Even a profile that guarantees a synchronization of "its device" may have meant the caller's (device 0).
    let device = ImplicitSync { guaranteed: SyncScope::Device, possible: SyncScope::Device };
    let r = verdict_with("s7-free-peer", &t, |p| p.implicit_sync.free = device);
    assert_eq!(kinds(&r), vec!["undefined sometimes"], "{}", r.to_text());
    // Waiting for every device, or for k itself, is enough.
    let all = ImplicitSync { guaranteed: SyncScope::AllDevices, possible: SyncScope::AllDevices };
    assert_eq!(kinds(&verdict_with("s7-free-peer", &t, |p| p.implicit_sync.free = all)), Vec::<String>::new());
    let synced = free_of_another_gpu(r#"StreamSync("s0@1"),"#);
    assert_eq!(kinds(&verdict_with("s7-free-peer", &synced, |_| {})), Vec::<String>::new());
}

/// Rank 0's device spins in a recv whose send rank 1 issues after the barrier; rank 0's thread frees rank 1's
/// buffer before it reaches the barrier.
const FREE_BEHIND_RECV: &str = r#"Program(ranks: 2, streams: [Stream("sA", NonBlocking)], buffers: [Buffer("a", "1 MiB"), Buffer("w", "1 MiB"), Buffer("x", "1 MiB")],
        comms: [Comm("world")],
        threads: [Thread("main", [
            Group([Send(to: Next, buf: "a", stream: "sA"), Recv(from: Prev, buf: "w", stream: "sA")]),
            DeviceSync,
            OnRanks([0], [Recv(from: Rank(1), buf: "a", stream: "sA"), Free("x@1"), Barrier("b")]),
            OnRanks([1], [Barrier("b"), Send(to: Rank(0), buf: "a", stream: "sA")]),
            DeviceSync,
        ])])"#;

#[test]
fn s7_cudafree_of_another_gpus_buffer_may_hang_behind_the_callers_device() {
    // Rank 0's device spins in a recv whose send rank 1 issues after the barrier; rank 0's thread frees rank 1's
    // buffer before it reaches the barrier. A free that synchronizes the calling thread's device waits for the recv:
    // a hang; one that synchronizes the pointer's device (rank 1, idle) does not.
    let t = FREE_BEHIND_RECV;
    use cuorder_model::profile::{ImplicitSync, SyncScope};
    let device = ImplicitSync { guaranteed: SyncScope::Device, possible: SyncScope::Device };
    let r = verdict_with("s7-free-peer-hang", t, |p| p.implicit_sync.free = device);
    assert_eq!(kinds(&r), vec!["deadlock sometimes"], "{}", r.to_text());
}

/// Issue 30's note, item 6: which device a cudaFree of another GPU's pointer synchronizes could not be pinned, so a
/// platform measured to synchronize one of them still had both explored. `free_device` pins it: with the pointer's
/// device guaranteed synchronized, freeing `x@1` after `k` on device 1 is ordered after `k`; with the caller's, it
/// is not (the use after free of `s7_cudafree_of_another_gpus_buffer_loads_and_may_sync_either_device`), and the
/// free that synchronizes the caller's device hangs behind its recv in every execution (the program of
/// `s7_cudafree_of_another_gpus_buffer_may_hang_behind_the_callers_device`).
#[test]
fn s7_which_device_a_cross_device_free_synchronizes_could_not_be_pinned() {
    use cuorder_model::profile::{FreeDevice, ImplicitSync, SyncScope};
    let device = ImplicitSync { guaranteed: SyncScope::Device, possible: SyncScope::Device };
    let pinned = |t: &str, d: FreeDevice| {
        let r = verdict_with("s7-free-pinned", t, move |p| {
            p.implicit_sync.free = device;
            p.free_device = d;
        });
        kinds(&r)
    };
    let t = free_of_another_gpu("");
    assert_eq!(pinned(&t, FreeDevice::Pointer), Vec::<String>::new());
    assert_eq!(pinned(&t, FreeDevice::Caller), vec!["undefined sometimes"]);
    assert_eq!(pinned(&t, FreeDevice::Either), vec!["undefined sometimes"]);
    let hang = FREE_BEHIND_RECV;
    assert_eq!(pinned(hang, FreeDevice::Pointer), Vec::<String>::new());
    assert_eq!(pinned(hang, FreeDevice::Caller), vec!["deadlock always"]);
    assert_eq!(pinned(hang, FreeDevice::Either), vec!["deadlock sometimes"]);
    // A profile file must say it, and says it back.
    let text = ron::ser::to_string_pretty(&cuorder_model::profile::Profile::portable(), Default::default()).unwrap();
    assert!(text.contains("free_device: Either,"), "{text}");
    let without = text.replace("free_device: Either,", "");
    let e = cuorder_model::profile::Profile::from_ron(&without).unwrap_err().to_string();
    assert!(e.contains("`free_device`") && e.contains("free_device: Either,"), "{e}");
}
