//! Timed runs (issue 9): a timed run is an execution the explorer can produce (its schedule replays step for step),
//! the 1F1B makespan matches the hand-derived formula, the same seed gives the same bytes (report and Chrome
//! trace), jitter changes times but not validity, and the Chrome trace has what the trace-event format requires.

mod common;

use std::collections::BTreeMap;

use cuorder_model::profile::Profile;
use cuorder_model::program::Program;
use cuorder_model::semantics::Semantics;
use cuorder_sim::cost::CostModel;
use cuorder_sim::pipeline::{pipeline, PipelineOptions, Schedule, Variant};
use cuorder_sim::run::{replay, run, Outcome};
use cuorder_sim::scheduler::RandomScheduler;
use cuorder_sim::timed::{summarize, timed_replay, timed_run, PathPart, TimedOptions};

fn portable() -> Profile {
    Profile::builtin("portable").unwrap()
}

fn load_file(rel: &str) -> Program {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    cuorder::load_program(&path, false).unwrap_or_else(|_| panic!("{rel} loads")).0
}

fn one_f_one_b(stages: u32, microbatches: u32, variant: Variant) -> Program {
    let o = PipelineOptions { schedule: Schedule::OneFOneB, stages, microbatches, bytes: 4096, variant, ..PipelineOptions::default() };
    cuorder_model::format::load("1f1b", &pipeline(&o).unwrap()).unwrap()
}

/// Every example and corpus program, and generated pipelines (correct, --bug, --race).
fn corpus() -> Vec<(String, Program)> {
    let mut out = common::programs_in(&["examples", "tests/cases"]);
    for v in [Variant::Correct, Variant::Bug, Variant::Race] {
        out.push((format!("1f1b 3x4 {v:?}"), one_f_one_b(3, 4, v)));
    }
    out
}

#[test]
fn a_timed_run_is_an_execution_the_explorer_can_produce() {
    for (name, prog) in corpus() {
        for prof in [portable(), Profile::builtin("eager").unwrap()] {
            let sem = Semantics::new(&prog, &prof);
            for (costs, seed, jitter) in [(CostModel::h200_nvlink(), 0, 0), (CostModel::ideal(), 3, 0), (CostModel::h200_nvlink(), 7, 20_000)] {
                let t = timed_run(&sem, &costs, &TimedOptions { seed, jitter_ns: jitter, ..TimedOptions::default() });
                let r = replay(&sem, &t.schedule).unwrap_or_else(|d| panic!("{name} ({}, seed {seed}): {d}", costs.name));
                // The same verdict as the untimed replay of the same schedule.
                let same = match (&t.outcome, &r.outcome) {
                    (Outcome::Completed, Outcome::Completed) => true,
                    (Outcome::Deadlock(_), Outcome::Deadlock(_)) => true,
                    (Outcome::Undefined(a), Outcome::Undefined(b)) => a.rule == b.rule,
                    _ => false,
                };
                assert!(same, "{name}: timed {:?} vs replay {:?}", t.outcome, r.outcome);
                assert_eq!(t.races.len(), r.races.len(), "{name}: races");
                assert!(t.times_ns.windows(2).all(|w| w[0] <= w[1]), "{name}: time runs backwards");
                for sp in &t.spans {
                    assert!(sp.start_ns <= sp.end_ns && sp.end_ns <= t.makespan_ns, "{name}: span {sp:?}");
                }
            }
        }
    }
}

#[test]
fn timing_a_random_runs_schedule_keeps_its_order() {
    // `run --timeline`: the schedule of any execution, timed, is the same schedule.
    for (name, prog) in corpus() {
        let prof = portable();
        let sem = Semantics::new(&prog, &prof);
        let tr = run(&sem, &mut RandomScheduler::new(11), Some(11), 100_000);
        for costs in [CostModel::logical(), CostModel::h200_nvlink()] {
            let t = timed_replay(&sem, &costs, &tr.schedule).unwrap_or_else(|d| panic!("{name}: {d}"));
            assert_eq!(t.schedule, tr.schedule, "{name}");
            if costs.logical {
                // Logical time: step i happens at time i + 1.
                assert!(t.times_ns.iter().enumerate().all(|(i, x)| *x == i as u64 + 1), "{name}: {:?}", t.times_ns);
            }
        }
    }
}

/// 1F1B with S stages and M microbatches, forward 1 ms and backward 2 ms kernels, 4 KiB messages.
///
/// By hand: in 1F1B every stage runs M forwards and M backwards; the critical path is the first microbatch's
/// forward through S stages, the last stage's M forward+backward pairs, and the last microbatch's backward back
/// through S stages: (S − 1) forwards + M × (1 + 2) ms + (S − 1) backwards = (M + S − 1) × 3 ms of compute. On top
/// of it, with the `ideal` costs, only the 1 ns each transfer is rounded up to: the prediction is exact to within
/// 2(M + S) ns. With the H200 costs (and connections set up beforehand: `connect_ns` 0, as NCCL_RUNTIME_CONNECT=0
/// does) each of those (M + S − 1) 3-ms slots also pays its two kernels' start overheads (2 × 5.28 µs) and at most
/// two hops, each an NCCL launch (6 µs) plus α (14.03 µs) plus 4 KiB / 373.9 GB/s (11 ns) = 20.04 µs: at most
/// 50.6 µs per slot, 1.69% of 3 ms. So the prediction lies in [base, base × 1.0169], within the 2% the issue asks.
/// Times 1F1B S × M under `ideal` and under the H200 costs without connection set-up, checks both against the
/// formula above, and returns the ideal run's summary.
fn check_1f1b(s: u64, m: u64) -> cuorder_sim::timed::Summary {
    let prog = one_f_one_b(s as u32, m as u32, Variant::Correct);
    let prof = portable();
    let sem = Semantics::new(&prog, &prof);
    let base = (m + s - 1) * 3_000_000;
    let ideal = timed_run(&sem, &CostModel::ideal(), &TimedOptions::default());
    assert_eq!(ideal.outcome, Outcome::Completed);
    assert!(ideal.makespan_ns >= base && ideal.makespan_ns <= base + 2 * (m + s), "S={s}: ideal {} vs {base}", ideal.makespan_ns);
    let real = timed_run(&sem, &CostModel { connect_ns: 0, ..CostModel::h200_nvlink() }, &TimedOptions::default());
    assert_eq!(real.outcome, Outcome::Completed);
    let ratio = real.makespan_ns as f64 / base as f64;
    assert!((1.0..=1.0169).contains(&ratio), "S={s}: predicted {} ns vs (M+S-1)x3 ms = {base} ns (ratio {ratio})", real.makespan_ns);
    summarize(&sem, &ideal)
}

#[test]
fn one_f_one_b_makespan_is_m_plus_s_minus_1_slots_of_3_ms() {
    let m = 8u64;
    for s in [2u64, 4, 16, 64, 128] {
        let sum = check_1f1b(s, m);
        // The last stage never waits between its steady-state pairs: its bubble is the fill and drain, 1 − 3M/(M+S−1)/3.
        let last = &sum.ranks[s as usize - 1];
        let want = 1.0 - (3 * m) as f64 / ((m + s - 1) * 3) as f64;
        assert!((last.bubble_fraction - want).abs() < 1e-3, "S={s}: bubble {} vs {want}", last.bubble_fraction);
    }
}

/// The same formula at 1024 stages (M = 2 keeps it to seconds: about 60,000 steps on 1024 ranks). With M < S,
/// 1F1B still fills, the last stage runs its M pairs back to back, and the last backward drains through S − 1 stages:
/// (S − 1) × 1 ms + M × 3 ms + (S − 1) × 2 ms = (M + S − 1) × 3 ms.
#[test]
fn one_f_one_b_makespan_holds_at_1024_stages() {
    check_1f1b(1024, 2);
}

#[test]
fn same_seed_same_bytes_report_and_chrome_trace() {
    let prog = one_f_one_b(4, 6, Variant::Race);
    let prof = portable();
        let sem = Semantics::new(&prog, &prof);
    let opt = TimedOptions { seed: 5, jitter_ns: 50_000, ..TimedOptions::default() };
    let render = || {
        let t = timed_run(&sem, &CostModel::h200_nvlink(), &opt);
        let sum = summarize(&sem, &t);
        (cuorder::timing::report_text(&sem, &t, &sum, "p.ron"), serde_json::to_string(&cuorder::timing::chrome_trace(&sem, &t)).unwrap())
    };
    let (a, b) = (render(), render());
    assert_eq!(a, b);
    // Another seed jitters differently (and is still an execution; see above).
    let other = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions { seed: 6, ..opt.clone() });
    assert_ne!(other.times_ns, timed_run(&sem, &CostModel::h200_nvlink(), &opt).times_ns);
}

#[test]
fn chrome_trace_has_what_the_trace_event_format_requires() {
    // Trace Event Format (Google, "JSON Object Format"): `traceEvents` array; every event has `ph`, `pid`, `tid`,
    // and (except metadata) `ts` in µs; `X` has `dur` ≥ 0; flow `s`/`f` pairs share `id`, and `f` binds to the
    // enclosing slice with `bp: "e"`, else to the next slice; metadata `M` events name processes and threads.
    for rel in ["examples/megatron-batch-p2p-race.ron", "examples/nccl-1456-send-first.ron", "examples/nccl-1456-grouped.ron"] {
        let prog = load_file(rel);
        let prof = portable();
        let sem = Semantics::new(&prog, &prof);
        let t = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default());
        let v = cuorder::timing::chrome_trace(&sem, &t);
        let evs = v["traceEvents"].as_array().unwrap();
        let mut flows: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        let mut named = std::collections::BTreeSet::new();
        for e in evs {
            let ph = e["ph"].as_str().unwrap_or_else(|| panic!("{rel}: no ph: {e}"));
            assert!(e["pid"].is_u64() && e["tid"].is_u64(), "{rel}: {e}");
            match ph {
                "M" => {
                    assert!(["process_name", "thread_name", "process_sort_index", "thread_sort_index"].contains(&e["name"].as_str().unwrap()));
                    if e["name"] == "thread_name" {
                        named.insert((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()));
                    }
                }
                "X" => {
                    assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() >= 0.0, "{rel}: {e}");
                    assert!(e["name"].is_string() && e["cat"].is_string(), "{rel}: {e}");
                }
                "s" | "f" => {
                    flows.entry(e["id"].as_u64().unwrap()).or_default().push(ph.to_string());
                    if ph == "f" {
                        assert!(e["bp"] == "e" || e.get("bp").is_none(), "{rel}: {e}");
                    }
                }
                "i" => assert!(["t", "p", "g"].contains(&e["s"].as_str().unwrap()), "{rel}: {e}"),
                other => panic!("{rel}: unexpected phase {other}"),
            }
        }
        assert!(flows.values().all(|v| v == &["s", "f"]), "{rel}: unpaired flows {flows:?}");
        // Every lane with an event is named.
        for e in evs.iter().filter(|e| e["ph"] == "X") {
            assert!(named.contains(&(e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())), "{rel}: unnamed lane {e}");
        }
        let kinds: Vec<&str> = evs.iter().filter_map(|e| e["cat"].as_str()).collect();
        if rel.contains("race") {
            assert!(kinds.contains(&"finding"), "{rel}: the race is not marked");
            assert!(evs.iter().any(|e| e["name"] == "send → recv"), "{rel}: no send→recv arrow");
            assert!(evs.iter().any(|e| e["name"] == "record → wait"), "{rel}: no record→wait arrow");
        }
        if rel.contains("send-first.ron") {
            assert!(evs.iter().any(|e| e["name"] == "undefined" || e["name"] == "deadlock"), "{rel}: the finding is not marked");
        }
    }
}

#[test]
fn a_cost_model_file_with_a_zero_bandwidth_is_refused_with_the_field() {
    let dir = std::env::temp_dir().join(format!("cuorder-costs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("c.ron");
    let text = ron::ser::to_string_pretty(&CostModel { copy_pinned_bytes_per_s: 0, ..CostModel::h200_nvlink() }, Default::default()).unwrap();
    std::fs::write(&f, text).unwrap();
    let e = cuorder::timing::load_costs(f.to_str().unwrap()).unwrap_err();
    assert!(e.contains("copy_pinned_bytes_per_s must be greater than 0"), "{e}");
    let e = cuorder::timing::load_costs("no-such-model").unwrap_err();
    assert!(e.contains("not a built-in cost model (h200-nvlink, ideal, logical)"), "{e}");
}

/// Regression (issue 10): a host function's `duration` was not a field, so a timed run gave it no time. A 200 us
/// host function between two kernels on one stream holds the stream: the makespan grows by exactly its duration.
#[test]
fn a_host_function_holds_its_stream_for_its_duration() {
    let text = |d: &str| {
        format!(
            r#"Program(ranks: 1, streams: [Stream("s", NonBlocking)], buffers: [Buffer("h", "4 KiB", space: PinnedHost)],
            threads: [Thread("main", [Kernel("a", stream: "s", duration: "1 ms"), HostFunc("log", stream: "s", writes: ["h"]{d}),
                Kernel("b", stream: "s", duration: "1 ms"), StreamSync("s")])])"#
        )
    };
    let makespan = |t: &str| {
        let (p, prof) = (cuorder_model::format::load("hf", t).unwrap(), portable());
        let sem = Semantics::new(&p, &prof);
        timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default()).makespan_ns
    };
    let (without, with) = (makespan(&text("")), makespan(&text(r#", duration: "200 us""#)));
    assert_eq!(with - without, 200_000, "{without} ns without, {with} ns with the host function's duration");
}

/// `Expect(.., written_by: HostFunc("name"))` (V1): what a host function stamped is seen by a host read after the
/// stream is synchronized, and is a stale read without the synchronize (S8: the function runs in stream order).
#[test]
fn an_expect_names_a_host_function_as_its_writer() {
    let text = |sync: &str| {
        format!(
            r#"Program(ranks: 1, streams: [Stream("s", NonBlocking)], buffers: [Buffer("h", "4 KiB", space: PinnedHost)],
            threads: [Thread("main", [HostFunc("log", stream: "s", writes: ["h"]), {sync} Expect("h", written_by: HostFunc("log"))])])"#
        )
    };
    let check = |t: &str| common::kinds(&cuorder::report::check(&cuorder_model::format::load("hf", t).unwrap(), &portable(), &Default::default()));
    assert_eq!(check(&text(r#"StreamSync("s"),"#)), Vec::<String>::new());
    assert_eq!(check(&text("")), ["stale read always", "data race always"]);
    // A host function of another name is not the writer.
    let e = cuorder_model::format::load("hf", &text(r#"StreamSync("s"),"#).replace(r#"HostFunc("log"))"#, r#"HostFunc("other"))"#));
    assert!(e.is_err());
}

/// The recorder drops the end of an event record once the state has forgotten the record (issue 9: they were kept
/// to the end of the run). A record is forgotten only after every wait bound to it has started, so each of these
/// 3,000 waits still draws its record -> wait arrow, though the run forgets many times on the way: stream sB is
/// behind (a 1 ms kernel per iteration), so sA's records end long before the waits bound to them start.
#[test]
fn record_wait_flows_survive_forgetting() {
    let text = r#"Program(
        ranks: 1,
        streams: [Stream("sA", NonBlocking), Stream("sB", NonBlocking)],
        events: ["e"],
        buffers: [Buffer("a", "1 MiB"), Buffer("b", "1 MiB")],
        threads: [Thread("host", [
            For(i, 0..3000, [
                Kernel("busy", stream: "sB", writes: ["b"], duration: "1 ms"),
                Kernel("w", stream: "sA", writes: ["a"], duration: "1 us"),
                Record("e", stream: "sA"),
                Wait("e", stream: "sB"),
                Kernel("r", stream: "sB", writes: ["b"], duration: "1 us"),
            ]),
            DeviceSync,
        ])],
    )"#;
    let prog = cuorder_model::format::load("flows", text).unwrap();
    let prof = portable();
    let sem = Semantics::new(&prog, &prof);
    let t = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default());
    assert_eq!(t.outcome, Outcome::Completed);
    assert!(t.races.is_empty());
    // Forgetting runs every max(32, agents, items / 2) steps: many times in these 30,002 steps.
    assert!(t.schedule.len() > 30_000, "{} steps", t.schedule.len());
    let waits = t.flows.iter().filter(|f| f.kind == cuorder_sim::timed::FlowKind::RecordWait).count();
    assert_eq!(waits, 3000);
}

/// Every flow arrow of a Chrome trace has slices to bind to, or Perfetto drops it: its start (`s`) lies inside a
/// slice of its track, its end inside one if it says `"bp": "e"`, else before a slice that starts later on its track
/// (Trace Event Format, "Flow Events"). A new user found most record -> wait arrows unbound: a record ends between
/// slices, and the kernel a wait gates starts after the wait (L3's arrow, promised in examples/streams/README.md,
/// was not drawn).
#[test]
fn every_flow_arrow_binds_to_a_slice() {
    let mut progs: Vec<(String, Program)> = ["examples/streams/L3-event-orders-streams.ron", "examples/megatron-batch-p2p-race.ron", "examples/nccl-1456-grouped.ron"]
        .iter()
        .map(|rel| (rel.to_string(), load_file(rel)))
        .collect();
    progs.push(("1f1b 4x6".into(), one_f_one_b(4, 6, Variant::Correct)));
    for (name, prog) in &progs {
        let prof = portable();
        let sem = Semantics::new(prog, &prof);
        let t = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default());
        let v = cuorder::timing::chrome_trace(&sem, &t);
        let evs = v["traceEvents"].as_array().unwrap();
        // Times in ns (ts and dur are µs with 3 decimals).
        let ns = |x: &serde_json::Value| (x.as_f64().unwrap() * 1000.0).round() as i64;
        let mut slices: BTreeMap<(u64, u64), Vec<(i64, i64)>> = BTreeMap::new();
        for e in evs.iter().filter(|e| e["ph"] == "X") {
            let (a, d) = (ns(&e["ts"]), ns(&e["dur"]));
            slices.entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())).or_default().push((a, a + d));
        }
        let (mut starts, mut ends) = (0, 0);
        for e in evs.iter().filter(|e| e["ph"] == "s" || e["ph"] == "f") {
            let track = &slices[&(e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())];
            let t = ns(&e["ts"]);
            let inside = track.iter().any(|&(a, b)| a <= t && t < b);
            if e["ph"] == "s" {
                assert!(inside, "{name}: flow start outside every slice of its track: {e}");
                starts += 1;
            } else if e["bp"] == "e" {
                assert!(inside, "{name}: flow end outside every slice of its track: {e}");
                ends += 1;
            } else {
                assert!(track.iter().any(|&(a, _)| a >= t), "{name}: no slice after the flow end: {e}");
                ends += 1;
            }
        }
        assert_eq!(starts, ends, "{name}");
        // The only arrows left out are record -> wait arrows that order nothing: from an event recorded on a stream
        // that had run nothing (it captures no work, S3; the pipeline records on its P2P stream before the first
        // transfer), or to a wait that no later work on its stream follows.
        for (i, f) in t.flows.iter().enumerate() {
            if !evs.iter().any(|e| e["id"] == i && e["ph"] == "s") {
                let ran_before = t.spans.iter().any(|s| (s.rank(&sem), s.lane) == (f.from_rank, f.from) && s.start_ns <= f.from_ns);
                let runs_after = t.spans.iter().any(|s| (s.rank(&sem), s.lane) == (f.to_rank, f.to) && s.end_ns >= f.to_ns);
                assert!(f.kind == cuorder_sim::timed::FlowKind::RecordWait && !(ran_before && runs_after), "{name}: arrow {f:?} left out");
            }
        }
        if name.contains("L3") {
            assert_eq!(starts, t.flows.len(), "{name}");
        }
        assert!(starts > 0, "{name}: no arrow");
        if name.contains("L3") {
            assert!(evs.iter().any(|e| e["name"] == "record → wait"), "{name}: no record -> wait arrow");
        }
    }
}

/// A race is marked where the later of its two accesses (in time) started, on that access's lane. It sat at the
/// start of the access the model applies second, on the other access's lane: a kernel's step fires at its end, so in
/// litmus L2 write_a (applied second) started at 9.7 us on sA while read_a started at 14.1 us on sB, and the mark was
/// at 9.7 us on sB, before anything ran there.
#[test]
fn race_mark_sits_at_the_later_access_start_on_its_lane() {
    let mut marks = 0;
    let prof = portable();
    for (name, prog) in corpus().into_iter().chain(common::programs_in(&["examples/streams"])) {
        let sem = Semantics::new(&prog, &prof);
        for seed in [0, 1] {
            let t = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions { seed, ..TimedOptions::default() });
            for m in &t.race_marks {
                marks += 1;
                let r = &t.races[m.race];
                let ops = [r.first.who.loc(), r.second.who.loc()];
                // The mark is the start of a span of one of the two ops, on that span's lane ...
                let at = t.spans.iter().find(|s| ops.contains(&s.op) && s.lane == m.lane && s.start_ns == m.at_ns);
                let Some(at) = at else {
                    // ... or of an access whose span is not drawn (a launch of a group: its span is the group end's).
                    continue;
                };
                // ... and no span of the other op, running at that time, started later.
                let other = if at.op == ops[0] { ops[1] } else { ops[0] };
                for s in t.spans.iter().filter(|s| s.op == other && s.start_ns <= m.at_ns.max(s.start_ns) && s.end_ns >= m.at_ns) {
                    assert!(s.start_ns <= m.at_ns, "{name} seed {seed}: the mark at {} ns, but the other access started at {} ns", m.at_ns, s.start_ns);
                }
            }
        }
    }
    assert!(marks >= 10, "only {marks} race marks checked");
    // L2 by hand: read_a starts at 14.130 us on sB (its launch 4.425 us after write_a's, plus the launch overhead).
    let l2 = load_file("examples/streams/L2-two-streams-race.ron");
    let sem = Semantics::new(&l2, &prof);
    let t = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default());
    assert_eq!(t.race_marks.len(), 1);
    assert_eq!(t.race_marks[0].at_ns, 14_130);
    assert_eq!(cuorder::timing::lane_name(&sem, t.race_marks[0].lane), "r0 sB");
}

/// Work still in progress when a run stops is drawn to its end. A new user found a deadlock's hung calls missing
/// from the text timeline and the Chrome trace (NCCL issue 1456 under eager: both hosts block in `#1 send` from
/// about 5 us, and their rows were blank), so the only sign of the hang was one instant event.
#[test]
fn hung_calls_were_left_out_of_the_timeline() {
    let prog = load_file("examples/nccl-1456-send-first.ron");
    let eager = Profile::builtin("eager").unwrap();
    let sem = Semantics::new(&prog, &eager);
    let t = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default());
    assert!(matches!(t.outcome, Outcome::Deadlock(_)), "{:?}", t.outcome);
    // The deadlock text has check's headings: without them a blocked thread read as listed twice (as a wait-for
    // edge and as a thread).
    let text = cuorder::timing::outcome_text(&t);
    assert!(text.contains("  wait-for ") && text.contains("  host threads:"), "{text}");
    let hung: Vec<_> = t.spans.iter().filter(|s| s.unfinished).collect();
    for rank in 0..2 {
        let s = hung
            .iter()
            .find(|s| s.kind == cuorder_sim::timed::SpanKind::HostBlocked && s.rank(&sem) == rank)
            .unwrap_or_else(|| panic!("r{rank}'s blocked send is not drawn: {hung:?}"));
        assert_eq!((s.op.op, s.end_ns), (1, t.makespan_ns), "r{rank}");
        assert!(s.start_ns < 10_000, "r{rank} blocked from {} ns", s.start_ns);
    }
    let v = cuorder::timing::chrome_trace(&sem, &t);
    let unfinished: Vec<_> = v["traceEvents"].as_array().unwrap().iter().filter(|e| e["args"]["unfinished"] == true).collect();
    assert_eq!(unfinished.len(), hung.len());
    assert!(unfinished.iter().all(|e| e["name"].as_str().unwrap().ends_with(" (unfinished)")), "{unfinished:?}");
    let lanes = cuorder::timing::lanes_text(&sem, &t, 40);
    let row = lanes.lines().find(|l| l.starts_with("r0 main")).unwrap_or_else(|| panic!("{lanes}"));
    assert!(row.ends_with("=|"), "{lanes}");
    // A run that completes has nothing unfinished.
    let ok = load_file("examples/nccl-1456-grouped.ron");
    let prof = portable();
    let sem_ok = Semantics::new(&ok, &prof);
    let done = timed_run(&sem_ok, &CostModel::h200_nvlink(), &TimedOptions::default());
    assert!(matches!(done.outcome, Outcome::Completed));
    assert!(done.spans.iter().all(|s| !s.unfinished));
}

/// A group end's NCCL launch is labelled with the stream it runs on. It was labelled with the host thread ("r1 main:
/// #6 group_end" right after "r1 main: returns from #6 group_end"), so the critical path read as if the call came
/// after its own return.
#[test]
fn group_launch_was_labelled_with_the_host_lane() {
    let prof = portable();
    let mut launches = 0;
    for rel in ["examples/nccl-1456-grouped.ron", "examples/megatron-batch-p2p-race.ron"] {
        let prog = load_file(rel);
        let sem = Semantics::new(&prog, &prof);
        let t = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default());
        for (i, step) in t.schedule.iter().enumerate() {
            let cuorder_model::semantics::Step::Item(k) = step else { continue };
            if !matches!(sem.op(k.loc()).kind, cuorder_model::program::OpKind::GroupEnd) {
                continue;
            }
            launches += 1;
            let (lane, what) = cuorder_sim::timed::describe(&sem, step, t.host_op(i));
            assert!(what.starts_with("NCCL launch of #"), "{rel}: {what}");
            let span_lanes: Vec<String> = t
                .spans
                .iter()
                .filter(|s| s.op == k.loc() && s.kind == cuorder_sim::timed::SpanKind::Nccl)
                .map(|s| cuorder::timing::lane_name(&sem, s.lane))
                .collect();
            assert!(span_lanes.contains(&lane), "{rel}: step {i} labelled {lane}, its launch ran on {span_lanes:?}");
        }
    }
    assert!(launches >= 2, "{launches}");
}

/// Clocks have a component per host thread and per stream that runs work, not per stream: a 1F1B rank runs work on
/// two of its four streams (compute and NCCL; never on the legacy and per-thread default streams), so its clocks
/// and every dense join are 3 components per rank, not 5 (4096 x 8: peak RSS 806 -> 692 MB, same output).
#[test]
fn clocks_carried_streams_that_never_run_work() {
    let prog = one_f_one_b(4, 4, Variant::Correct);
    let prof = portable();
    let sem = Semantics::new(&prog, &prof);
    assert_eq!(sem.agents, 4 + 4 * 4);
    assert_eq!(sem.components, 4 + 4 * 2);
    let st = sem.initial();
    assert_eq!(st.host.threads[0].clock.agents(), sem.components);
    // The timed run and the explorer still agree on this program (a stream that ran work without a component
    // would panic here).
    let t = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default());
    assert!(matches!(t.outcome, Outcome::Completed));
}

/// `cuorder time --max-time-s` did not count the time spent loading the program (loading 1F1B 1024 x 64 alone takes
/// about a second): the limit counted from the start of the run. It now counts from `TimedOptions::clock_start`,
/// which the command sets to its own start.
#[test]
fn max_time_did_not_count_loading() {
    let prog = one_f_one_b(4, 4, Variant::Correct);
    let prof = portable();
    let sem = Semantics::new(&prog, &prof);
    let limit = std::time::Duration::from_secs(60);
    // A command that started two minutes ago (as if loading took that long) has used its 60 s already.
    let clock_start = std::time::Instant::now().checked_sub(std::time::Duration::from_secs(120));
    let Some(clock_start) = clock_start else { return }; // a monotonic clock younger than two minutes: nothing to test
    let late = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions { max_time: Some(limit), clock_start: Some(clock_start), ..TimedOptions::default() });
    assert!(matches!(late.outcome, Outcome::TimeLimit { steps: 0, limit_ms: 60_000 }), "{:?}", late.outcome);
    // Counted from the run's own start, the same limit is far away.
    let fresh = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions { max_time: Some(limit), ..TimedOptions::default() });
    assert!(matches!(fresh.outcome, Outcome::Completed), "{:?}", fresh.outcome);
}

/// The critical path runs from 0 to the last step, each step starting when the one before it fired, so its time by
/// kind of step (`Summary::critical_parts`) adds up to the makespan, on every corpus program, profile and cost
/// model; and each part's steps are the path's steps of that kind that take time.
#[test]
fn critical_parts_add_up_to_the_makespan() {
    for (name, prog) in corpus() {
        for prof in [portable(), Profile::builtin("eager").unwrap()] {
            let sem = Semantics::new(&prog, &prof);
            for costs in [CostModel::h200_nvlink(), CostModel::ideal(), CostModel::logical()] {
                let t = timed_run(&sem, &costs, &TimedOptions::default());
                let sum = summarize(&sem, &t);
                let total: u64 = sum.critical_parts.iter().map(|p| p.ns).sum();
                assert_eq!(total, sum.makespan_ns, "{name} ({}): parts {:?}", costs.name, sum.critical_parts);
                let timed = sum.critical_path.iter().filter(|c| c.end_ns > c.start_ns).count();
                assert_eq!(sum.critical_parts.iter().map(|p| p.steps as usize).sum::<usize>(), timed, "{name}");
                assert!(sum.critical_parts.windows(2).all(|w| w[0].ns >= w[1].ns), "{name}: not most first");
                assert!(sum.critical_parts.iter().all(|p| p.ns > 0), "{name}: a part that takes no time");
            }
        }
    }
}

/// A 1F1B pipeline under the H200 costs spends nearly its whole makespan setting up connections (N7: every stage
/// connects to the next only when the activation reaches it, 100 ms per direction), and the report said nothing of
/// it: a user saw 1.4 s for 8 stages of 4 x 3 ms. The critical path's parts say so; without set-up costs the
/// kernels are most of it.
#[test]
fn a_makespan_of_connection_setups_was_not_told_apart() {
    let prog = one_f_one_b(8, 4, Variant::Correct);
    let prof = portable();
    let sem = Semantics::new(&prog, &prof);
    let first = summarize(&sem, &timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default()));
    let setup = &first.critical_parts[0];
    assert_eq!(setup.part, PathPart::ConnectionSetup, "{:?}", first.critical_parts);
    // Seven stage boundaries, each set up once forward and once backward, one after the other.
    assert_eq!((setup.steps, setup.ns), (14, 14 * 100_000_000), "{:?}", first.critical_parts);
    let later = summarize(&sem, &timed_run(&sem, &CostModel { connect_ns: 0, ..CostModel::h200_nvlink() }, &TimedOptions::default()));
    assert_eq!(later.critical_parts[0].part, PathPart::Kernel, "{:?}", later.critical_parts);
    assert!(later.critical_parts.iter().all(|p| p.part != PathPart::ConnectionSetup));
    // (M + S - 1) x 3 ms of kernels, but for the kernel overheads.
    let kernels = later.critical_parts[0].ns;
    assert!((33_000_000..33_200_000).contains(&kernels), "{kernels}");
}

/// A run that takes only the steps the profile guarantees (`TimedOptions::withhold`) is an execution too: its
/// schedule replays on every corpus program. On the send-first exchange (`examples/nccl-1456-send-first-connected.ron`,
/// which hung on the H200s) the generous run completes through eager deliveries beyond the guaranteed window (N2)
/// and the withholding one deadlocks in the cycle `check` reports.
#[test]
fn a_run_withholding_unguaranteed_steps_is_an_execution() {
    let prof = portable();
    for (name, prog) in corpus() {
        let sem = Semantics::new(&prog, &prof);
        let t = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions { withhold: true, ..TimedOptions::default() });
        replay(&sem, &t.schedule).unwrap_or_else(|d| panic!("{name}: {d}"));
        assert_eq!(t.unguaranteed, (0, None), "{name}: a withholding run took an unguaranteed step");
    }
    let prog = load_file("examples/nccl-1456-send-first-connected.ron");
    let sem = Semantics::new(&prog, &prof);
    let generous = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default());
    assert_eq!(generous.outcome, Outcome::Completed);
    let (n, first) = generous.unguaranteed;
    assert_eq!(n, 2);
    assert!(matches!(generous.schedule[first.unwrap() as usize], cuorder_model::semantics::Step::Eager { .. }));
    let strict = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions { withhold: true, ..TimedOptions::default() });
    let Outcome::Deadlock(stuck) = &strict.outcome else { panic!("{:?}", strict.outcome) };
    assert!(stuck.is_cycle && stuck.cycle.len() == 4, "{stuck:?}");
}

/// `gen pipeline --schedule interleaved --chunks 2` gave every chunk a full 1 ms forward and 2 ms backward, a model
/// twice as large as the 1F1B it is compared with, so interleaving looked 1.7x slower (ideal 57 ms against 33 ms at
/// 4 stages x 8 microbatches; new-user trial). A chunk holds 1/v of its stage's layers (Megatron's virtual
/// pipeline): each rank now computes M x 3 ms whatever the chunks, and interleaving shortens the bubble, as it is
/// meant to: (S - 1) x 3 ms / v of fill and drain instead of (S - 1) x 3 ms.
#[test]
fn interleaved_chunks_each_took_a_whole_stage() {
    let prof = portable();
    let time = |schedule: Schedule, chunks: u32| {
        let o = PipelineOptions { schedule, stages: 4, microbatches: 8, chunks, bytes: 4096, ..PipelineOptions::default() };
        let prog = cuorder_model::format::load("p", &pipeline(&o).unwrap()).unwrap();
        let sem = Semantics::new(&prog, &prof);
        let t = timed_run(&sem, &CostModel::ideal(), &TimedOptions::default());
        assert_eq!(t.outcome, Outcome::Completed);
        summarize(&sem, &t)
    };
    let plain = time(Schedule::OneFOneB, 1);
    assert!(plain.ranks.iter().all(|r| r.compute_ns == 24_000_000), "{:?}", plain.ranks);
    for v in [2u32, 4] {
        let inter = time(Schedule::Interleaved, v);
        for r in &inter.ranks {
            // 1 ms / 3 and 2 ms / 3 are written in whole nanoseconds: at most 1 ns short per kernel.
            assert!(r.compute_ns <= 24_000_000 && r.compute_ns + 2 * 8 * u64::from(v) >= 24_000_000, "v={v}: {:?}", inter.ranks);
        }
        assert!(inter.makespan_ns < plain.makespan_ns, "v={v}: interleaved {} vs 1F1B {}", inter.makespan_ns, plain.makespan_ns);
    }
}

/// When the run withholding unguaranteed steps stops at a limit, whether the program hangs without them is not
/// known, and the report said nothing (it read as if the program had been cleared). It now says so.
#[test]
fn a_withheld_run_cut_by_a_limit_went_unsaid() {
    let prog = load_file("examples/nccl-1456-send-first-connected.ron");
    let prof = portable();
    let sem = Semantics::new(&prog, &prof);
    let strict = timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions { withhold: true, max_steps: 5, ..TimedOptions::default() });
    assert!(matches!(strict.outcome, Outcome::StepLimit(5)), "{:?}", strict.outcome);
    let run = cuorder_sim::timed::TimedRun { withheld: cuorder_sim::timed::Withheld::Cut, ..timed_run(&sem, &CostModel::h200_nvlink(), &TimedOptions::default()) };
    let text = cuorder::timing::report_text(&sem, &run, &summarize(&sem, &run), "f.ron");
    assert!(text.contains("note: this execution took 2 steps that profile portable does not guarantee, and the run without them stopped at a limit"), "{text}");
}
