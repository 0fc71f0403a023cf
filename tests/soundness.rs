//! Regression tests for issue 7 ("a model that is sound in both directions"): each test is named after what was
//! wrong, states the verdict the rules imply (`docs/semantics.md`), and failed before the fix.

mod common;

use common::{check_text, kinds};
use cuorder::report::check;
use cuorder_model::profile::Profile;
use cuorder_model::rule::Rule;
use cuorder_model::semantics::Semantics;
use cuorder_model::verdict::Problem;
use cuorder_sim::explore::{explore, explore_with, FinalKind, Limits};

fn load(name: &str, text: &str) -> cuorder_model::program::Program {
    cuorder_model::format::load(name, text).unwrap_or_else(|_| panic!("{name} does not load"))
}

fn rules(r: &cuorder::report::Report) -> Vec<String> {
    r.findings.iter().map(|f| f.text.lines().next().unwrap_or("").to_string()).collect()
}

/// Item 1: one host thread driving both GPUs of a communicator (NCCL "Management of multiple GPUs from one
/// thread"): the acting rank of each op is its stream's rank, so the group is every member's part.
#[test]
fn n4_one_thread_driving_two_gpus_in_one_group_completes() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("g", "4 KiB")], comms: [Comm("world")],
        threads: [Thread("main", ranks: [0], ops: [
            Group([AllReduce(buf: "g", stream: "s0"), AllReduce(buf: "g@1", stream: "s0@1")]),
            StreamSync("s0"), StreamSync("s0@1"),
        ])])"#;
    for profile in ["portable", "eager"] {
        let r = check_text("one-thread-two-gpus", t, profile);
        assert_eq!(kinds(&r), Vec::<String>::new(), "{profile}:\n{}", r.to_text());
    }
}

/// Item 2: a query by a thread of another rank observes how far the device has got: the kernel's end may not be
/// taken alone, or the "not ready" answer disappears (partial-order reduction dropped executions).
#[test]
fn por_keeps_the_not_ready_answer_of_a_query_from_another_rank() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], events: ["e"], buffers: [Buffer("a", "4 KiB")], comms: [],
        threads: [
            Thread("producer", ranks: [0], ops: [Kernel("k", stream: "s0", writes: ["a"]), Record("e", stream: "s0")]),
            Thread("observer", ranks: [1], ops: [EventQuery("e@0")]),
        ])"#;
    let p = load("query-other-rank", t);
    let profile = Profile::portable();
    let sem = Semantics::new(&p, &profile);
    let observer = sem.thread_id(1, 0) as usize;
    let mut answers = std::collections::BTreeSet::new();
    explore_with(&sem, &Limits::default(), &mut |st, kind| {
        if kind == FinalKind::Complete {
            answers.insert(st.host.threads[observer].answers.clone());
        }
    });
    // Never recorded yet (ready), recorded and done (ready), recorded and not done (not ready).
    assert!(answers.contains(&vec![false]), "the not-ready answer is missing: {answers:?}");
    assert!(answers.contains(&vec![true]), "{answers:?}");
}

/// Item 3a: one thread per GPU in one process, each with its own communicator handle, is documented usage (NCCL
/// "Thread safety"), not undefined.
#[test]
fn n11_one_thread_per_gpu_in_one_process_is_defined() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("g", "4 KiB")], comms: [Comm("world")],
        threads: [
            Thread("gpu0", ranks: [0], ops: [AllReduce(buf: "g", stream: "s0"), StreamSync("s0")]),
            Thread("gpu1", ranks: [0], ops: [AllReduce(buf: "g@1", stream: "s0@1"), StreamSync("s0@1")]),
        ])"#;
    let r = check_text("thread-per-gpu", t, "portable");
    assert_eq!(kinds(&r), Vec::<String>::new(), "{}", r.to_text());
}

/// Item 3b: issuing to independent communicators of one device from two threads in parallel is not safe (NCCL
/// "Thread safety"): undefined, rule N11.
#[test]
fn n11_two_threads_on_two_communicators_of_one_device_are_undefined() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking), Stream("s1", NonBlocking)],
        buffers: [Buffer("g", "4 KiB"), Buffer("h", "4 KiB")], comms: [Comm("c1"), Comm("c2")],
        threads: [
            Thread("a", [AllReduce(buf: "g", stream: "s0", comm: "c1"), StreamSync("s0")]),
            Thread("b", [AllReduce(buf: "h", stream: "s1", comm: "c2"), StreamSync("s1")]),
        ])"#;
    let p = load("two-comms-two-threads", t);
    let r = check(&p, &Profile::eager(), &Limits::default());
    assert!(kinds(&r).iter().all(|k| k.starts_with("undefined")) && !r.findings.is_empty(), "{}", r.to_text());
    assert_eq!(r.completed_final_states, 0, "{}", r.to_text());
    let ex = explore(&Semantics::new(&p, &Profile::eager()), &Limits::default());
    assert!(ex.findings.iter().any(|f| matches!(&f.problem, Problem::Undefined(u) if u.rule == Rule::N11)));
}

/// The new-user trial of 2026-12-03: the same unordered pair of NCCL calls from two threads of one device was
/// reported twice (thread a before b, and b before a), four findings for two devices. Each N11 finding now names
/// both calls, so a pair is one problem whichever call came first.
#[test]
fn n11_the_same_pair_of_calls_was_reported_twice() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB"), Buffer("y", "1 MiB")],
        comms: [Comm("a"), Comm("b")],
        threads: [
            Thread("t0", [AllReduce(buf: "x", stream: "s0", comm: "a"), StreamSync("s0")]),
            Thread("t1", [AllReduce(buf: "y", stream: "s0", comm: "b"), StreamSync("s0")]),
        ])"#;
    let r = check_text("n11-pair", t, "portable");
    assert_eq!(r.findings.len(), 2, "one per device: {}", r.to_text());
    for (f, rank) in r.findings.iter().zip(["r0", "r1"]) {
        assert!(f.text.contains("rule N11"), "{}", f.text);
        let calls = [format!("at {rank} t0 #0 all_reduce(x"), format!("at {rank} t1 #0 all_reduce(y")];
        assert!(calls.iter().all(|c| f.text.contains(c.as_str())), "both calls named: {}", f.text);
    }
}

/// Item 4: two collectives of one group on one buffer run concurrently (NCCL issue 900): a data race.
#[test]
fn n4_two_collectives_of_one_group_on_one_buffer_race() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("g", "4 KiB")], comms: [Comm("world")],
        threads: [Thread("main", [Group([AllReduce(buf: "g", stream: "s0"), AllReduce(buf: "g", stream: "s0")]), StreamSync("s0")])])"#;
    let r = check_text("group-collectives-race", t, "eager");
    assert!(kinds(&r).iter().any(|k| k.starts_with("data race")), "{}", r.to_text());
}

const S5: &str = r#"Program(ranks: 1, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "4 KiB"),
    Buffer("h", "4 KiB", space: PageableHost), Buffer("p", "4 KiB", space: PinnedHost), Buffer("q", "4 KiB", space: PinnedHost)],
    comms: [], threads: [Thread("main", [OPS])])"#;

fn s5(ops: &str) -> Vec<String> {
    kinds(&check_text("s5", &S5.replace("OPS", ops), "portable"))
}

/// Item 5a: an asynchronous copy from pageable memory *might* be host-synchronous (CUDA "API synchronization
/// behavior"): nothing may rely on it, so overwriting the source after the call races with the copy.
#[test]
fn s5_async_copy_from_pageable_memory_orders_nothing() {
    assert_eq!(s5(r#"Memcpy(dst: "x", src: "h", stream: "s0"), HostWrite("h")"#), vec!["data race always"]);
}

/// Item 5b: the same for an asynchronous copy to pageable memory: reading the destination after the call races.
#[test]
fn s5_async_copy_to_pageable_memory_orders_nothing() {
    assert_eq!(s5(r#"Memcpy(dst: "h", src: "x", stream: "s0"), HostRead("h")"#), vec!["data race always"]);
}

/// Item 5c: a synchronous pageable-to-device copy returns once the source is staged, before the DMA is done: the
/// source may be reused, the destination is not yet written.
#[test]
fn s5_sync_copy_from_pageable_memory_returns_before_the_dma() {
    assert_eq!(s5(r#"Memcpy(dst: "x", src: "h"), HostWrite("h")"#), Vec::<String>::new());
    assert_eq!(s5(r#"Memcpy(dst: "x", src: "h"), Kernel("k", stream: "s0", reads: ["x"])"#), vec!["data race always"]);
}

/// Item 5d: any host-to-host copy is fully synchronous, asynchronous API or not.
#[test]
fn s5_async_pinned_host_to_host_copy_is_synchronous() {
    assert_eq!(s5(r#"Memcpy(dst: "q", src: "p", stream: "s0"), HostRead("q"), HostWrite("p")"#), Vec::<String>::new());
}

/// Item 6a: connections are set up per communicator: a group that touches two communicators is not "non-mirrored"
/// first contact just because the peer's group touches only one of them.
#[test]
fn n7_connections_are_set_up_per_communicator() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "4 KiB"), Buffer("y", "4 KiB")],
        comms: [Comm("c1"), Comm("c2")],
        threads: [Thread("main", [
            OnRanks([0], [
                Group([Send(to: Rank(1), buf: "x", stream: "s0", comm: "c1"), Recv(from: Rank(1), buf: "y", stream: "s0", comm: "c1")]),
                Group([Send(to: Rank(1), buf: "x", stream: "s0", comm: "c2"), Recv(from: Rank(1), buf: "y", stream: "s0", comm: "c2")]),
            ]),
            OnRanks([1], [
                Group([Send(to: Rank(0), buf: "x", stream: "s0", comm: "c1"), Recv(from: Rank(0), buf: "y", stream: "s0", comm: "c1"),
                       Send(to: Rank(0), buf: "x", stream: "s0", comm: "c2"), Recv(from: Rank(0), buf: "y", stream: "s0", comm: "c2")]),
            ]),
            StreamSync("s0"),
        ])])"#;
    let r = check_text("n7-per-comm", t, "portable");
    assert!(!kinds(&r).iter().any(|k| k.starts_with("undefined")), "{}", r.to_text());
}

/// Item 6b: since NCCL 2.22 a collective connects its peers lazily at first use (NCCL_RUNTIME_CONNECT), blocking
/// the host: a rank whose first collective waits for a peer that is blocked in its own P2P set-up hangs. The
/// message names the communicators.
#[test]
fn n7_collectives_connect_lazily_and_messages_name_the_communicator() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking), Stream("s1", NonBlocking)],
        buffers: [Buffer("g", "4 KiB"), Buffer("x", "4 KiB")], comms: [Comm("world"), Comm("p2p")],
        threads: [Thread("main", [
            OnRanks([0], [AllReduce(buf: "g", stream: "s0", comm: "world"), Send(to: Rank(1), buf: "x", stream: "s1", comm: "p2p")]),
            OnRanks([1], [Recv(from: Rank(0), buf: "x", stream: "s1", comm: "p2p"), StreamSync("s1"), AllReduce(buf: "g", stream: "s0", comm: "world")]),
            DeviceSync,
        ])])"#;
    let r = check_text("n7-collective-lazy", t, "eager");
    assert_eq!(kinds(&r), vec!["deadlock always"], "{}", r.to_text());
    let text = r.to_text();
    assert!(text.contains("on world (collective)") && text.contains("on p2p"), "{text}");
}

/// Item 7: a broadcast root need not wait for the other members to start: its send may finish early (C1).
#[test]
fn c1_broadcast_root_may_finish_before_the_members_start() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("g", "4 KiB")], comms: [Comm("world")],
        threads: [Thread("main", [
            // A first collective connects the communicator (N7, NCCL 2.22+): do it before the exchange.
            AllReduce(buf: "g", stream: "s0"), StreamSync("s0"),
            OnRanks([0], [Broadcast(root: Rank(0), buf: "g", stream: "s0"), StreamSync("s0"), Barrier("b")]),
            OnRanks([1], [Barrier("b"), Broadcast(root: Rank(0), buf: "g", stream: "s0"), StreamSync("s0")]),
        ])])"#;
    // A guaranteed eager window covers the root's 4 KiB: it always completes.
    assert_eq!(kinds(&check_text("c1-root", t, "eager")), Vec::<String>::new());
    // Portable: the root may finish early, or wait for the members (then the barrier never opens).
    assert_eq!(kinds(&check_text("c1-root", t, "portable")), vec!["deadlock sometimes"]);
}

/// Portable explores both outcomes of every send (N2): a send-first exchange after connections exist may complete
/// eagerly or hang, so the deadlock is "sometimes", and a race that needs the send to finish before its recv runs
/// is found.
#[test]
fn n2_portable_explores_eager_and_rendezvous() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB"), Buffer("y", "1 MiB")],
        comms: [Comm("world")],
        threads: [Thread("main", [
            Group([Send(to: Next, buf: "x", stream: "s0"), Recv(from: Prev, buf: "y", stream: "s0")]),
            StreamSync("s0"),
            Send(to: Next, buf: "x", stream: "s0"), Recv(from: Prev, buf: "y", stream: "s0"),
            StreamSync("s0"),
        ])])"#;
    let r = check_text("n2-both", t, "portable");
    assert_eq!(kinds(&r), vec!["deadlock sometimes"], "{}", r.to_text());
    // Treating every send as rendezvous hides races (`common::EAGER_ONLY_RACE`).
    let race = common::EAGER_ONLY_RACE;
    let r = check_text("n2-race", race, "portable");
    assert_eq!(kinds(&r), vec!["data race sometimes"], "{}", r.to_text());
    let rendezvous = Profile { eager_bytes_per_connection: 0, eager_bytes_guaranteed: None, ..Profile::portable() };
    assert_eq!(kinds(&check(&load("n2-race", race), &rendezvous, &Limits::default())), Vec::<String>::new());
}

/// The calibrated profile claims no independent progress on the strength of one observation (S1): the crossed
/// two-communicator exchange can starve.
#[test]
fn s1_calibrated_profile_does_not_guarantee_independent_progress() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/profiles/h200x2-nvlink-nccl2.28.3.ron");
    let p = Profile::from_ron(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(!p.independent_progress && p.independent_progress_observed, "{p:?}");
}

/// Every finding names its rule, and `docs/semantics.md` has a section for it (`cuorder explain`).
#[test]
fn every_rule_a_message_cites_is_documented() {
    let t = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB")], comms: [Comm("world")],
        threads: [Thread("main", [Send(to: Next, buf: "x", stream: "s0"), StreamSync("s0")])])"#;
    let p = load("rules", t);
    let ex = explore(&Semantics::new(&p, &Profile::portable()), &Limits::default());
    for f in &ex.findings {
        if let Problem::Deadlock(d) = &f.problem {
            for e in &d.cycle {
                assert!(e.reason.rule().doc().is_some(), "{:?}", e.reason);
            }
        }
    }
    let _ = rules;
}
