//! `cuorder shrink` (issue 8): a saved finding's program shrinks to a handful of ops that show the same kind of
//! problem (same signature: a cross-rank deadlock stays cross-rank, a race keeps its op kinds), the result loads, and
//! its artifact replays to the same problem.

use std::process::Command;

mod common;

use cuorder_model::profile::Profile;
use cuorder_model::semantics::Semantics;
use cuorder_sim::pipeline::{pipeline, PipelineOptions, Schedule, Variant};

fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cuorder")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn shrink_variant(schedule: Schedule, stages: u32, mb: u32, variant: Variant, kind: &str) {
    let dir = std::env::temp_dir().join(format!("cuorder-shrink-{}-{variant:?}-{stages}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let chunks = if schedule == Schedule::Interleaved { 2 } else { 1 };
    // Unrolled (one thread per rank): shrinking removes ops as written, so that each rank's ops can go one by one.
    let o = PipelineOptions { schedule, stages, microbatches: mb, chunks, variant, unroll: true, ..PipelineOptions::default() };
    let prog_path = dir.join("p.ron");
    std::fs::write(&prog_path, pipeline(&o).unwrap()).unwrap();
    let p = prog_path.to_str().unwrap();
    let (code, out, err) = cli(&["explore", p, "--strategy", "random", "--first", "--executions", "200", "--save", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    let artifact = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).find(|f| f.to_string_lossy().contains("finding-1")).unwrap();
    let (code, out, err) = cli(&["shrink", artifact.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("\n{kind}: ")), "{out}");
    let min = dir.join("p-min.ron");
    let text = std::fs::read_to_string(&min).unwrap();
    let prog = cuorder_model::format::load("p-min", &text).unwrap_or_else(|_| panic!("the shrunk program loads:\n{text}"));
    let ops: usize = prog.ranks.iter().flat_map(|r| &r.threads).map(|t| t.ops.len()).sum();
    let before: usize = cuorder_model::format::load("p", &pipeline(&o).unwrap()).unwrap().ranks.iter().flat_map(|r| &r.threads).map(|t| t.ops.len()).sum();
    assert!(ops <= 12 && ops < before, "{before} ops shrank only to {ops}:\n{text}");
    // The same signature as the original finding.
    let rep = cuorder::report::check(&prog, &Profile::builtin("portable").unwrap(), &Default::default());
    assert!(rep.findings.iter().any(|f| f.kind == kind), "{}", rep.to_text());
    if kind == "deadlock" {
        let portable = Profile::builtin("portable").unwrap();
        let sem = Semantics::new(&prog, &portable);
        let f = rep.findings.iter().find(|f| f.kind == kind).unwrap();
        assert_eq!(cuorder::shrink::signature(&sem, f).cross_rank, Some(true), "the deadlock still spans ranks:\n{text}");
    }
    // Its artifact replays.
    let (code, out, err) = cli(&["replay", min.with_extension("finding.ron").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("reproduced"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn send_before_recv_deadlock_of_a_pipeline_shrinks_to_a_few_ops() {
    shrink_variant(Schedule::OneFOneB, 3, 3, Variant::Bug, "deadlock");
}

/// Regression (a new user's report): the deadlock between stages 2 and 3 of a 4-stage pipeline shrank to 6 ops on 4
/// ranks, ranks 0 and 1 left with empty threads (only the last rank could go). A rank whose threads are gone is
/// removed now and the ranks above it renumbered.
#[test]
fn ranks_left_empty_in_the_middle_go_and_the_others_are_renumbered() {
    let dir = std::env::temp_dir().join(format!("cuorder-shrink-ranks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let o = PipelineOptions { stages: 4, microbatches: 3, variant: Variant::Bug, unroll: true, ..PipelineOptions::default() };
    let prog_path = dir.join("p.ron");
    std::fs::write(&prog_path, pipeline(&o).unwrap()).unwrap();
    let (code, out, err) = cli(&["explore", prog_path.to_str().unwrap(), "--strategy", "random", "--first", "--executions", "200", "--save", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    let (code, out, err) = cli(&["shrink", dir.join("finding-1-deadlock.ron").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let min = std::fs::read_to_string(dir.join("p-min.ron")).unwrap();
    let prog = cuorder_model::format::load("p-min", &min).unwrap();
    assert_eq!(prog.ranks.len(), 2, "{out}\n{min}");
    let (code, out, err) = cli(&["replay", dir.join("p-min.finding.ron").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn event_inside_the_group_race_shrinks_to_a_few_ops() {
    shrink_variant(Schedule::OneFOneB, 2, 2, Variant::Race, "data race");
}

#[test]
fn shrinking_a_finding_the_program_does_not_have_says_so() {
    let dir = std::env::temp_dir().join(format!("cuorder-shrink-none-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (code, out, err) = cli(&["explore", "examples/megatron-batch-p2p-race.ron", "--strategy", "random", "--first", "--save", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    let artifact = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).find(|f| f.to_string_lossy().contains("finding-1")).unwrap();
    let (code, _, err) = cli(&["shrink", artifact.to_str().unwrap(), "--program", "examples/megatron-batch-p2p-fixed.ron"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no data race found in megatron-batch-p2p-fixed"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Regression (issue 10 review): the race of Megatron's batched P2P before PyTorch PR 82450 (the works' end events
/// recorded inside the NCCL group, N10) shrank to a program without the `WorkWait`, a race of another kind (no wait
/// at all). The rules a race's hints cite are part of its signature: the wait stays, and so does the N10 hint.
#[test]
fn shrinking_a_race_keeps_the_wait_that_orders_nothing() {
    let dir = std::env::temp_dir().join(format!("cuorder-shrink-n10-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (code, out, err) = cli(&[
        "explore", "examples/torch/megatron-batch-p2p.ron", "--torch-version", "before82450", "--first", "--save", dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}{err}");
    let artifact = dir.join("finding-1-data-race.ron");
    let (code, out, err) = cli(&["shrink", artifact.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let text = std::fs::read_to_string(dir.join("megatron-batch-p2p-min.ron")).unwrap();
    assert!(text.contains("WorkWait(\"reqs\")"), "the wait went:\n{text}");
    // The finding needs --torch-version before82450, which the program's own `torch:` does not say: the header
    // does (a new user's review found the shrunk program clean under plain `check`).
    assert!(text.contains("// Found with --torch-version before82450: check it with `cuorder check"), "{text}");
    assert!(!out.contains("(device memory):\n"), "dangling colon: {out}");
    let prog = cuorder_model::format::load("min", &text).unwrap();
    let rep = cuorder::report::check(&prog, &Profile::builtin("portable").unwrap(), &Default::default());
    assert!(rep.findings.iter().any(|f| f.kind == "data race" && f.text.contains("(N10)")), "{}", rep.to_text());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Regression (2026-12-02): `shrink ART -o DIR` shrank an 8-stage pipeline for 4 minutes and then failed with "cannot
/// write DIR: Is a directory". A folder now receives `NAME-min.ron`, and a path in a folder that does not exist is
/// refused before any search (exit 2, at once).
#[test]
fn shrink_out_may_be_a_folder_and_a_missing_folder_is_refused_first() {
    let dir = std::env::temp_dir().join(format!("cuorder-shrink-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("into")).unwrap();
    let o = PipelineOptions { stages: 2, microbatches: 2, variant: Variant::Bug, ..PipelineOptions::default() };
    let prog_path = dir.join("p.ron");
    std::fs::write(&prog_path, pipeline(&o).unwrap()).unwrap();
    let (code, out, err) = cli(&["explore", prog_path.to_str().unwrap(), "--strategy", "random", "--first", "--executions", "200", "--save", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    let artifact = dir.join("finding-1-deadlock.ron");
    let missing = dir.join("nowhere").join("m.ron");
    let (code, _, err) = cli(&["shrink", artifact.to_str().unwrap(), "-o", missing.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not exist"), "{err}");
    let (code, out, err) = cli(&["shrink", artifact.to_str().unwrap(), "-o", dir.join("into").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(dir.join("into").join("p-min.ron").exists() && dir.join("into").join("p-min.finding.ron").exists(), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An SPMD pipeline (the default of `gen pipeline`: loops over microbatches, conditions on `stage`) shrinks too: ops
/// as written go (a number every loop bound repeats may be lowered everywhere at once, but not a size or duration,
/// which decide eager or rendezvous under other profiles); the result still has the finding, and `shrink` says that
/// loops keep what they repeat in every iteration.
#[test]
fn an_spmd_pipeline_shrinks_and_shrink_says_loops_remain() {
    let dir = std::env::temp_dir().join(format!("cuorder-shrink-spmd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let o = PipelineOptions { stages: 2, microbatches: 2, variant: Variant::Race, ..PipelineOptions::default() };
    let text = pipeline(&o).unwrap();
    assert!(text.contains("For(i, "), "SPMD form");
    let prog_path = dir.join("p.ron");
    std::fs::write(&prog_path, &text).unwrap();
    let (code, out, err) = cli(&["explore", prog_path.to_str().unwrap(), "--strategy", "random", "--first", "--executions", "200", "--save", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    let artifact = dir.join("finding-1-data-race.ron");
    let (code, out, err) = cli(&["shrink", artifact.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("note: the shrunk program still has loops"), "{out}");
    let min = std::fs::read_to_string(dir.join("p-min.ron")).unwrap();
    let before: usize = cuorder_model::format::load("p", &text).unwrap().ranks.iter().flat_map(|r| &r.threads).map(|t| t.ops.len()).sum();
    let prog = cuorder_model::format::load("p-min", &min).unwrap();
    let after: usize = prog.ranks.iter().flat_map(|r| &r.threads).map(|t| t.ops.len()).sum();
    assert!(after < before / 2, "{before} ops shrank only to {after}:\n{min}");
    assert!(min.contains("Buffer(\"x0\", \"16 MiB\")"), "sizes are kept (regression: they were lowered, and the shrunk program was clean under `eager`):\n{min}");
    let rep = cuorder::report::check(&prog, &Profile::builtin("portable").unwrap(), &Default::default());
    assert!(rep.findings.iter().any(|f| f.kind == "data race"), "{}", rep.to_text());
    // Shrinking the result again finds nothing smaller, and says so (it said "shrunk .. to 15 ops (from 15 ops)").
    let (code, out, err) = cli(&["shrink", dir.join("p-min.finding.ron").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("found no smaller program than "), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Regression (2026-12-03, a differential tester): `shrink` panicked (index out of bounds in `Semantics::rank_of`)
/// on a race found in a program whose rank 1 runs no thread of its own (rank 0's thread drives both devices). A
/// candidate without the recv deadlocks on "r1 never issues one", and the wait-for graph named rank 1 by its first
/// thread, which does not exist (for a rank in the middle it was the next rank's thread). `Node::Never` now names the
/// rank.
#[test]
fn shrinking_a_program_whose_peer_rank_runs_no_thread_panicked() {
    let dir = std::env::temp_dir().join(format!("cuorder-shrink-nothread-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let prog_path = dir.join("p.ron");
    std::fs::write(&prog_path, common::EAGER_ONLY_RACE).unwrap();
    let p = prog_path.to_str().unwrap();
    let (code, out, err) = cli(&["explore", p, "--executions", "10", "--jobs", "1", "--first", "--save", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    let (code, out, err) = cli(&["shrink", dir.join("finding-1-data-race.ron").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\ndata race: "), "{out}");
    // A deadlock on a rank in the middle that runs no thread: its wait-for graph names rank 1, not rank 2's thread.
    let mid = r#"Program(ranks: 3, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB")], comms: [Comm("world")],
        threads: [
            Thread("a", ranks: [0], ops: [Send(to: Rank(1), buf: "x", stream: "s0"), StreamSync("s0")]),
            Thread("b", ranks: [2], ops: [Kernel("k", stream: "s0", writes: ["x"]), StreamSync("s0")]),
        ])"#;
    let prog = cuorder_model::format::load("mid", mid).unwrap();
    let portable = Profile::builtin("portable").unwrap();
    let rep = cuorder::report::check(&prog, &portable, &Default::default());
    let f = rep.findings.iter().find(|f| f.kind == "deadlock").expect("a deadlock");
    let cuorder_model::verdict::Problem::Deadlock(d) = &f.finding.problem else { panic!("not a deadlock") };
    let never: Vec<u32> = d
        .cycle
        .iter()
        .filter_map(|e| match e.to {
            cuorder_model::semantics::Node::Never(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(never, vec![1], "{}", rep.to_text());
    let sem = Semantics::new(&prog, &portable);
    assert_eq!(cuorder::shrink::signature(&sem, f).cross_rank, Some(true));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Regression: lowering a number everywhere it is written (`2` -> `1`, then `1` -> `0`) lowered the ranks of a rank
/// list too, and the shrunk program said `OnRanks([0, 0, 0], ..)`: each rank now stays once in the list (`[0]`), in
/// every candidate, so the result is also the smallest list.
#[test]
fn shrinking_wrote_a_rank_list_with_duplicates() {
    let text = r#"Program(ranks: 4, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "4 KiB", space: PinnedHost)],
    threads: [
        Thread("main", [
            OnRanks([0, 1, 2], [Kernel("k", stream: "s0", writes: ["x"]), HostRead("x")]),
        ]),
        Thread("side", ranks: [0, 1, 2], ops: [DeviceSync]),
    ])"#;
    let portable = Profile::builtin("portable").unwrap();
    let s = cuorder::shrink::shrink("dup", text, &portable, "data race", &Default::default()).unwrap();
    assert!(s.text.contains("OnRanks([0], ["), "{}", s.text);
    assert!(s.text.contains("ranks: 1,"), "{}", s.text);
    assert!(!s.text.contains("ranks: [0, 0") && !s.text.contains("[0, 0"), "{}", s.text);
    cuorder_model::format::load("dup-min", &s.text).unwrap_or_else(|_| panic!("the shrunk program loads:\n{}", s.text));
}
