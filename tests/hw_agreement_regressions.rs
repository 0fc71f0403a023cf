//! Regression tests for issue 12 (the single-GPU agreement batch, traces/hw/cover-2026-12-01): each test is named
//! after what the hardware showed that the model or the conformance check got wrong, and failed before the fix.

use cuorder_model::build::Builder;
use cuorder_model::observation::*;
use cuorder_model::profile::Profile;
use cuorder_model::program::*;
use cuorder_model::semantics::Semantics;
use cuorder_model::verdict::Problem;
use cuorder_sim::conform::conform;
use cuorder_sim::explore::{explore, Limits};

fn id(index: u32) -> OpId {
    OpId { rank: 0, thread: 0, index }
}

fn completed(p: &Program, reads: Vec<(u32, u32, Seen)>) -> Observation {
    let reads = reads
        .into_iter()
        .map(|(op, k, seen)| {
            let range = match &p.ranks[0].threads[0].ops[op as usize].kind {
                OpKind::Kernel { reads, .. } => reads[k as usize],
                other => panic!("{other:?}"),
            };
            ReadObservation { op: id(op), read_index: k, range, seen }
        })
        .collect();
    Observation {
        format_version: FORMAT_VERSION,
        program: p.name.clone(),
        outcome: Outcome::Completed,
        environment: Environment::default(),
        timeout_ms: 1000,
        versions: Default::default(),
        reads,
        ops: vec![],
        clock_anchors: vec![],
    }
}

fn agrees(p: &Program, o: &Observation) -> bool {
    let profile = Profile::portable();
    let sem = Semantics::new(p, &profile);
    let c = conform(&sem, o, &Limits::default());
    eprintln!("{}", c.to_text());
    c.agrees()
}

/// cover-450 and 14 more: a kernel that reads and writes the same bytes saw its own version in part of the range
/// (its blocks probe, spin and stamp independently). The check allowed only other ops' writes.
#[test]
fn a_kernel_may_see_its_own_writes() {
    let mut b = Builder::new("own", 1);
    let s = b.stream("sA", StreamKind::NonBlocking);
    let d = b.buffer("d", 4096, MemSpace::Device, false);
    let r = b.whole(0, d);
    b.op(0, 0, OpKind::Kernel { stream: StreamRef { rank: 0, index: s }, name: "k".into(), reads: vec![r], writes: vec![r], duration_ns: 0 });
    let p = b.finish();
    let seen = Seen::Mixed { first: Version::Initial, last: Version::Op(id(0)), min: Version::Initial, max: Version::Op(id(0)) };
    assert!(agrees(&p, &completed(&p, vec![(0, 0, seen)])));
    // Another op's version is still refused.
    let mut wrong = completed(&p, vec![(0, 0, Seen::Uniform(Version::Op(id(7))))]);
    wrong.reads[0].seen = Seen::Uniform(Version::Unknown(3));
    assert!(!agrees(&p, &wrong));
}

/// cover-1233, cover-2683: a kernel writing two overlapping ranges (`W: d[0..half], d`) had each of its writes
/// "certainly overwritten" by the other (its item starts and ends in one step), so a later read on the same stream
/// was allowed to see nothing but later writes.
#[test]
fn a_kernel_writing_overlapping_ranges_does_not_hide_its_own_write() {
    let mut b = Builder::new("overlap", 1);
    let s = StreamRef { rank: 0, index: b.stream("sA", StreamKind::NonBlocking) };
    let d = b.buffer("d", 4096, MemSpace::Device, false);
    let whole = b.whole(0, d);
    let half = BufRange { len: 2048, ..whole };
    b.op(0, 0, OpKind::Kernel { stream: s, name: "w".into(), reads: vec![], writes: vec![half, whole], duration_ns: 0 })
        .op(0, 0, OpKind::Kernel { stream: s, name: "r".into(), reads: vec![half], writes: vec![], duration_ns: 0 });
    let p = b.finish();
    assert!(agrees(&p, &completed(&p, vec![(1, 0, Seen::Uniform(Version::Op(id(0))))])));
    assert!(!agrees(&p, &completed(&p, vec![(1, 0, Seen::Uniform(Version::Initial))])));
}

/// cover-1871, cover-1925, cover-3658, cover-4318, cover-5001, cover-5511: a wait of the legacy stream for an
/// event never recorded ordered later blocking-stream work after earlier blocking-stream work in the model (its
/// marker took part in the legacy stream's implicit synchronization, S2), but on the H200 the later kernel started
/// long before the earlier one ended: such a wait enqueues nothing.
#[test]
fn a_legacy_stream_wait_for_a_never_recorded_event_orders_nothing() {
    let mut b = Builder::new("legacy-wait", 1);
    let sb = StreamRef { rank: 0, index: b.stream("sB", StreamKind::Blocking) };
    let sc = StreamRef { rank: 0, index: b.stream("sC", StreamKind::Blocking) };
    let e = EventRef { rank: 0, index: b.event("e") };
    let a = b.buffer("a", 4096, MemSpace::Device, false);
    let ra = b.whole(0, a);
    b.op(0, 0, OpKind::Kernel { stream: sb, name: "w".into(), reads: vec![], writes: vec![ra], duration_ns: 1_000_000 })
        .op(0, 0, OpKind::StreamWaitEvent { stream: StreamRef { rank: 0, index: 0 }, event: e })
        .op(0, 0, OpKind::Kernel { stream: sc, name: "r".into(), reads: vec![ra], writes: vec![], duration_ns: 0 });
    let p = b.finish();
    let profile = Profile::portable();
    let ex = explore(&Semantics::new(&p, &profile), &Limits::default());
    assert!(ex.findings.iter().any(|f| matches!(f.problem, Problem::DataRace(_))), "{:?}", ex.findings);
    // With the event recorded first the wait binds to that record (S3) and is an item of the legacy stream, which
    // the model still orders after earlier blocking-stream work (S2): not contradicted by the batch, not confirmed.
    let mut recorded = p.clone();
    recorded.ranks[0].threads[0].ops.insert(
        0,
        Op { kind: OpKind::EventRecord { event: e, stream: sb }, origin: Origin::default() },
    );
    let ex = explore(&Semantics::new(&recorded, &profile), &Limits::default());
    assert!(ex.findings.is_empty(), "{:?}", ex.findings);
}
