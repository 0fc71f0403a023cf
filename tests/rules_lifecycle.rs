//! Rule tests of a communicator's life after init (N9 watchdog, N12 non-blocking communicators, N13 abort, finalize,
//! destroy in docs/semantics.md), in the style of tests/rules.rs: each states the verdict the rule implies and
//! checks the explorer (or a timed run) reaches it.

mod common;
use common::{check_text, kinds};
use cuorder_model::profile::Profile;
use cuorder_model::semantics::{Semantics, Step};
use cuorder_sim::cost::CostModel;
use cuorder_sim::run::Outcome;
use cuorder_sim::timed::{timed_run, TimedOptions};

/// A two-rank program (streams s0, s1; device buffers x, y, w, v of 4 KiB; communicators as given) with one SPMD
/// main thread and optional extra threads.
fn gpu2(comms: &str, main: &str, extra: &str) -> String {
    format!(
        "Program(ranks: 2, streams: [Stream(\"s0\", NonBlocking), Stream(\"s1\", NonBlocking)], events: [\"e\"], \
         buffers: [Buffer(\"x\", \"4 KiB\"), Buffer(\"y\", \"4 KiB\"), Buffer(\"w\", \"4 KiB\"), Buffer(\"v\", \"4 KiB\")], \
         comms: [{comms}], threads: [Thread(\"main\", [{main}]){extra}])"
    )
}

/// A grouped warm-up exchange on `comm` that sets up both directions (N7), then a host sync.
fn warm(comm: &str) -> String {
    format!(
        r#"Group([Send(to: Next, buf: "w", stream: "s0", comm: "{comm}"), Recv(from: Prev, buf: "v", stream: "s0", comm: "{comm}")]), Poll("{comm}"), StreamSync("s0"),"#
    )
}

fn verdict(name: &str, text: &str) -> Vec<String> {
    kinds(&check_text(name, text, "portable"))
}

const NB: &str = r#"Comm("nb", init: Explicit, config: NonBlocking)"#;

/// N12: a non-blocking `CommInit` returns ncclInProgress; the next call on the communicator before a poll sees
/// ncclSuccess is undefined. With the poll the program is clean.
#[test]
fn n12_call_before_the_poll_is_undefined() {
    let call = r#"Group([Send(to: Next, buf: "x", stream: "s0", comm: "nb"), Recv(from: Prev, buf: "y", stream: "s0", comm: "nb")])"#;
    let bad = gpu2(NB, &format!(r#"CommInit("nb"), {call}, Poll("nb"), StreamSync("s0")"#), "");
    let r = check_text("N12-no-poll", &bad, "portable");
    // Every execution is undefined, at rank 0's call or at rank 1's, whichever comes first: two findings, each in
    // some executions (the reduced search saw only rank 0's before undefined states widened their parent).
    assert_eq!(kinds(&r), vec!["undefined sometimes", "undefined sometimes"]);
    let unreduced = cuorder::report::check(
        &cuorder_model::format::load("N12-no-poll", &bad).unwrap(),
        &cuorder_model::profile::Profile::portable(),
        &cuorder_sim::explore::Limits { reduce: false, forget: false, ..Default::default() },
    );
    assert_eq!(kinds(&unreduced), kinds(&r));
    assert!(r.findings[0].text.contains("rule N12 broken") && r.findings[0].text.contains("still in progress"), "{}", r.findings[0].text);
    let good = gpu2(NB, &format!(r#"CommInit("nb"), Poll("nb"), {call}, Poll("nb"), StreamSync("s0")"#), "");
    assert_eq!(verdict("N12-poll", &good), Vec::<String>::new());
}

/// N12, N10: the work of a call that returned ncclInProgress is enqueued only once a poll sees ncclSuccess; an
/// event recorded before that captures nothing of it, so a kernel ordered after the event races with the recv in
/// the executions where the call was in progress (it may also have returned ncclSuccess, enqueued: then no race).
/// Polling before the record orders the recv.
#[test]
fn n12_work_in_progress_is_enqueued_after_the_poll() {
    let body = |poll_first: bool| {
        let (before, after) = if poll_first { (r#"Poll("nb"),"#, "") } else { ("", r#"Poll("nb"),"#) };
        gpu2(
            NB,
            &format!(
                r#"CommInit("nb"), Poll("nb"), {w}
                   Group([Send(to: Next, buf: "x", stream: "s0", comm: "nb"), Recv(from: Prev, buf: "y", stream: "s0", comm: "nb")]),
                   {before} Record("e", stream: "s0"), Wait("e", stream: "s1"), Kernel("use", stream: "s1", reads: ["y"]), {after}
                   DeviceSync"#,
                w = warm("nb")
            ),
            "",
        )
    };
    let v = verdict("N12-deferred", &body(false));
    assert!(!v.is_empty() && v.iter().all(|k| k == "data race sometimes"), "{v:?}");
    assert_eq!(verdict("N12-poll-first", &body(true)), Vec::<String>::new());
}

/// N12: connection set-up of a non-blocking call runs in the background, so a host that goes on to a barrier
/// does not block its peer there. The same program on a blocking communicator deadlocks (N7: the first send
/// blocks the host until the peer's recv, which waits behind the barrier).
#[test]
fn n12_connection_set_up_progresses_in_the_background() {
    let body = |comm: &str| {
        gpu2(
            comm,
            r#"OnRanks([0], [Send(to: Rank(1), buf: "x", stream: "s0", comm: "c"), Barrier("b"), Poll("c"), StreamSync("s0")]),
               OnRanks([1], [Barrier("b"), Recv(from: Rank(0), buf: "y", stream: "s0", comm: "c"), Poll("c"), StreamSync("s0")])"#,
            "",
        )
    };
    assert_eq!(verdict("N12-background", &body(r#"Comm("c", config: NonBlocking)"#)), Vec::<String>::new());
    assert_eq!(verdict("N7-blocking", &body(r#"Comm("c")"#)), vec!["deadlock always"]);
}

/// N12: NCCL refuses a group that mixes blocking and non-blocking communicators.
#[test]
fn n12_a_group_mixing_blocking_and_non_blocking_communicators_is_undefined() {
    let t = gpu2(
        r#"Comm("nb", config: NonBlocking), Comm("b")"#,
        r#"Group([Send(to: Next, buf: "x", stream: "s0", comm: "nb"), Recv(from: Prev, buf: "y", stream: "s0", comm: "b")]), DeviceSync"#,
        "",
    );
    let r = check_text("N12-mixed", &t, "portable");
    // Each rank's group end is undefined; whichever runs first ends the execution.
    assert!(!r.findings.is_empty() && kinds(&r).iter().all(|k| k.starts_with("undefined")), "{:?}", kinds(&r));
    assert!(r.findings[0].text.contains("blocking and non-blocking"), "{}", r.findings[0].text);
}

/// N13: `ncclCommAbort` from another thread ends a recv that no send will ever meet, so the host waiting on it
/// returns; relying on the aborted recv's data is undefined. Without the abort the program hangs.
#[test]
fn n13_abort_ends_a_spinning_launch_and_its_data_is_undefined() {
    let main = |expect: &str| {
        format!(
            r#"{w} OnRanks([0], [Recv(from: Rank(1), buf: "y", stream: "s0"), Barrier("b"), StreamSync("s0") {expect}])"#,
            w = warm("world")
        )
    };
    let guard = r#", Thread("guard", ranks: [0], ops: [Barrier("b"), CommAbort("world")])"#;
    let world = r#"Comm("world")"#;
    assert_eq!(verdict("N13-abort", &gpu2(world, &main(""), guard)), Vec::<String>::new());
    let hang = gpu2(world, &main(""), r#", Thread("guard", ranks: [0], ops: [Barrier("b")])"#);
    assert_eq!(verdict("N13-no-abort", &hang), vec!["deadlock always"]);
    let r = check_text("N13-aborted-data", &gpu2(world, &main(r#", Expect("y", written_by: Recv, stream: "s0")"#), guard), "portable");
    assert_eq!(kinds(&r), vec!["undefined always"]);
    assert!(r.findings[0].text.contains("rule N13 broken") && r.findings[0].text.contains("aborted"), "{}", r.findings[0].text);
}

/// N13: a destroyed communicator may not be used again; nor may an aborted one.
#[test]
fn n13_use_after_destroy_or_abort_is_undefined() {
    let send = r#"Group([Send(to: Next, buf: "x", stream: "s0"), Recv(from: Prev, buf: "y", stream: "s0")])"#;
    let world = r#"Comm("world")"#;
    let ok = gpu2(world, &format!(r#"{send}, CommDestroy("world"), DeviceSync"#), "");
    assert_eq!(verdict("N13-destroy", &ok), Vec::<String>::new());
    for end in [r#"CommDestroy("world")"#, r#"CommAbort("world")"#, r#"CommFinalize("world"), CommDestroy("world")"#] {
        let bad = gpu2(world, &format!(r#"{send}, {end}, {send}, DeviceSync"#), "");
        let r = check_text("N13-use-after", &bad, "portable");
        assert!(!r.findings.is_empty() && kinds(&r).iter().all(|k| k.starts_with("undefined")), "{end}: {:?}", kinds(&r));
        assert!(r.findings[0].text.contains("may not be used again"), "{}", r.findings[0].text);
    }
    // After a finalize only a destroy may follow.
    let bad = gpu2(world, &format!(r#"CommFinalize("world"), {send}, DeviceSync"#), "");
    let v = verdict("N13-after-finalize", &bad);
    assert!(!v.is_empty() && v.iter().all(|k| k.starts_with("undefined")), "{v:?}");
}

/// N13: `ncclCommFinalize` is a collective call (it returns once every member has called it), and it flushes this
/// rank's work on the communicator: a kernel issued after it is ordered after the recv, while one issued after a
/// mere host barrier races with it.
#[test]
fn n13_finalize_is_collective_and_flushes() {
    let world = r#"Comm("world")"#;
    let never = gpu2(world, r#"OnRanks([0], [CommFinalize("world")])"#, "");
    let r = check_text("N13-finalize-alone", &never, "portable");
    assert_eq!(kinds(&r), vec!["deadlock always"]);
    assert!(r.findings[0].text.contains("never finalizes world (N13)"), "{}", r.findings[0].text);
    let body = |sync: &str| {
        gpu2(
            world,
            &format!(
                r#"Group([Send(to: Next, buf: "x", stream: "s0"), Recv(from: Prev, buf: "y", stream: "s0")]), {sync},
                   Kernel("use", stream: "s1", reads: ["y"]), DeviceSync"#
            ),
            "",
        )
    };
    assert_eq!(verdict("N13-finalize-flushes", &body(r#"CommFinalize("world")"#)), Vec::<String>::new());
    let v = verdict("N13-no-flush", &body(r#"Barrier("b")"#));
    assert!(!v.is_empty() && v.iter().all(|k| k.starts_with("data race")), "{v:?}");
}

/// A recv that no send meets, on a connected communicator, with the host waiting on it.
fn hung(watchdog: &str) -> String {
    gpu2(
        &format!(r#"Comm("world"{watchdog})"#),
        &format!(r#"{w} OnRanks([0], [Recv(from: Rank(1), buf: "y", stream: "s0"), StreamSync("s0")])"#, w = warm("world")),
        "",
    )
}

/// N9: a host watchdog turns the hang into an abort after its timeout: the finding is a timeout with the wait-for
/// chain at the moment it fired; without the watchdog the same program is a deadlock.
#[test]
fn n9_watchdog_turns_a_hang_into_an_abort() {
    assert_eq!(verdict("N9-no-watchdog", &hung("")), vec!["deadlock always"]);
    let r = check_text("N9-watchdog", &hung(r#", watchdog: "30 s""#), "portable");
    assert_eq!(kinds(&r), vec!["timeout always"]);
    let t = &r.findings[0].text;
    assert!(t.contains("hang turned into abort after timeout") && t.contains("after 30 s"), "{t}");
    assert!(t.contains("has no matching send: r1 never issues one (N3)"), "{t}");
}

/// N9: one hang is one finding, whichever hung rank's watchdog fires first, and it happens in every execution.
/// Keyed by the rank that fired, four ranks hung in a collective (one member skips it) were 12 findings, each "in
/// some executions": three ranks could fire first, and the later firings of the same hang after the first abort
/// counted as findings of their own.
#[test]
fn n9_one_hang_was_reported_once_per_rank_whose_watchdog_fired_first() {
    let text = r#"Program(
    ranks: 4,
    streams: [Stream("s", NonBlocking)],
    buffers: [Buffer("x", "4 KiB")],
    comms: [Comm("world", watchdog: "5 s")],
    threads: [Thread("main", ops: [
        AllReduce(buf: "x", stream: "s"), StreamSync("s"),
        If(rank < 3, [AllReduce(buf: "x", stream: "s"), StreamSync("s")]),
    ])],
)"#;
    let r = check_text("N9-four-ranks", text, "portable");
    assert_eq!(kinds(&r), vec!["timeout always"], "{}", r.to_text());
    assert!(r.findings[0].text.contains("r3 never issues its part (C1)"), "{}", r.findings[0].text);
    // Artifacts saved before carry the rank that fired in the key; replay still matches them by the positions.
    use cuorder_model::verdict::ProblemKey;
    let at = vec![(0, 3), (1, 3), (2, 3)];
    assert!(ProblemKey::Hang(at.clone()).matches(&ProblemKey::Timeout(1, at.clone())));
    assert!(ProblemKey::Hang(at.clone()).matches(&ProblemKey::Hang(at.clone())));
    assert!(!ProblemKey::Hang(at[1..].to_vec()).matches(&ProblemKey::Timeout(1, at)));
}

/// N9: a timed run fires the watchdog at its time: the run completes, and the abort comes 30 s after the recv
/// started.
#[test]
fn n9_timed_runs_fire_the_watchdog_at_its_time() {
    let p = cuorder_model::format::load("N9-timed", &hung(r#", watchdog: "30 s""#)).expect("loads");
    let profile = Profile::builtin("portable").expect("built-in");
    let sem = Semantics::new(&p, &profile);
    let run = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default());
    assert!(matches!(run.outcome, Outcome::Completed), "{:?}", run.outcome);
    let at = run.schedule.iter().position(|s| matches!(s, Step::Watchdog { rank: 0 })).expect("the watchdog fired");
    assert!(run.times_ns[at] >= 30_000_000_000 && run.times_ns[at] < 31_000_000_000, "{}", run.times_ns[at]);
}

/// The hardware programs of the lifecycle calls (`hw/programs/`, run with `cuorder-hw run` on two GPUs) are clean
/// in the model: a hang or a failure on the hardware is then a finding about NCCL or the lowering, not the program.
#[test]
fn the_hardware_lifecycle_programs_are_clean_in_the_model() {
    for f in ["hw/programs/nonblocking-lifecycle.ron", "hw/programs/abort-spinning-recv.ron"] {
        let (r, _) = common::check_file(f, "portable");
        assert_eq!(kinds(&r), Vec::<String>::new(), "{f}: {}", r.to_text());
    }
}

/// Issue 30 item 5: `cudaStreamPerThread` beside a non-blocking communicator. NCCL launches a non-blocking group
/// from a background thread of its own, with the stream handle the user passed, so `sPT` there is that thread's
/// per-thread stream: the NCCL work is not ordered with the user's kernels on `sPT` (it still synchronizes with the
/// legacy stream, S2). The model said clean.
fn spt_exchange(comm: &str, produce: &str, consume: &str, sync: &str) -> String {
    gpu2(
        comm,
        &format!(
            r#"CommInit("c"), Poll("c"),
               Group([Send(to: Next, buf: "w", stream: "sPT", comm: "c"), Recv(from: Prev, buf: "v", stream: "sPT", comm: "c")]), Poll("c"), DeviceSync,
               Kernel("produce", stream: "{produce}", writes: ["x"]),
               Group([Send(to: Next, buf: "x", stream: "sPT", comm: "c"), Recv(from: Prev, buf: "y", stream: "sPT", comm: "c")]),
               Poll("c"),
               Kernel("consume", stream: "{consume}", reads: ["y"]),
               {sync}"#
        ),
        "",
    )
}

#[test]
fn n12_nccl_on_spt_of_a_non_blocking_communicator_is_not_ordered_with_the_callers_spt() {
    let nb = r#"Comm("c", init: Explicit, config: NonBlocking)"#;
    let r = check_text("N12-sPT", &spt_exchange(nb, "sPT", "sPT", r#"StreamSync("sPT")"#), "portable");
    // produce/send and recv/consume, on each rank.
    assert_eq!(kinds(&r), vec!["data race always"; 4], "{}", r.to_text());
    let text = r.to_text();
    assert!(text.contains("sPT.main#nccl1"), "the background thread's stream is named: {text}");
    // The legacy stream synchronizes with every per-thread stream, NCCL's background thread's included (S2).
    assert_eq!(verdict("N12-sL", &spt_exchange(nb, "sL", "sL", "DeviceSync")), Vec::<String>::new());
    // A blocking communicator launches from the calling thread: its sPT orders everything.
    let blocking = r#"Comm("c", init: Explicit)"#;
    assert_eq!(verdict("N12-sPT-blocking", &spt_exchange(blocking, "sPT", "sPT", r#"StreamSync("sPT")"#)), Vec::<String>::new());
}
