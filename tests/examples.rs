//! Every program in examples/ with its expected verdict under the default profile, and a snapshot of the rendered
//! explanation. A new example must be added to the table (the last test fails otherwise).

mod common;
use common::{check_file, kinds};

/// (file, expected kinds under `portable`).
const EXPECTED: &[(&str, &[&str])] = &[
    // First contact is not mirrored (N7): undefined before the rendezvous cycle can form (see the file's header).
    ("nccl-1456-send-first.ron", &["undefined always"]),
    // Connected first: the rendezvous cycle, "sometimes" because portable lets any send be buffered eagerly (N2).
    ("nccl-1456-send-first-connected.ron", &["deadlock sometimes"]),
    ("nccl-1456-grouped.ron", &[]),
    ("nccl-1456-parity.ron", &[]),
    ("megatron-batch-p2p-race.ron", &["data race always", "data race always", "data race always", "data race always"]),
    ("megatron-batch-p2p-fixed.ron", &[]),
    // cudaFree may synchronize the device (S7) while the recv waits for a send issued after a barrier.
    ("cudafree-during-recv.ron", &["deadlock sometimes"]),
    // The same kind of cycle through an all-reduce, which only hangs when collectives connect at init (N7).
    ("cudafree-collective-connect-at-init.ron", &["deadlock sometimes"]),
    // Clean under portable, whose launch queue is unbounded; see the test below for a bounded one (S6).
    ("launch-queue-full.ron", &[]),
    // N14: the third send to r1 is in the second kernel plan, behind the send to r2, whose recv waits for r1.
    ("group-plan-split.ron", &["deadlock sometimes"]),
    // The same calls in two groups that each fit one plan.
    ("group-plan-split-fixed.ron", &[]),
    // N14: hangs only when each kernel plan restarts NCCL's schedule at round 0 (NCCL 2.22-2.29.3).
    ("group-plan-order-restart.ron", &["deadlock sometimes"]),
    // N14: hangs only when each kernel plan continues where the previous one was cut (NCCL >= 2.29.7).
    ("group-plan-order-continue.ron", &["deadlock sometimes"]),
];

/// (file in examples/torch/, profile, expected kinds): the PyTorch-dialect examples.
const TORCH_EXPECTED: &[(&str, &str, &[&str])] = &[
    // Both ranks' first P2P call needs the direction towards the other: non-mirrored first contact (N7).
    ("nccl-1456.ron", "portable", &["undefined always"]),
    // Under eager both hosts block in connection set-up inside dist.send: the reported hang.
    ("nccl-1456.ron", "eager", &["deadlock always"]),
    // Before PR 82450 (the file's version): req.wait() orders nothing (P3, N10).
    ("megatron-batch-p2p.ron", "portable", &["data race always", "data race always", "data race always", "data race always"]),
    ("megatron-batch-p2p-synchronize.ron", "portable", &[]),
    // The experts read the all-to-all's output before work.wait() (P1): a race on every rank.
    ("new-group-all-to-all.ron", "portable", &["data race always", "data race always", "data race always", "data race always"]),
    // TORCH_NCCL_AVOID_RECORD_STREAMS: the stash lets go at the wait, and the block returns to a stream the wait
    // did not order after the send (P4).
    ("avoid-record-streams.ron", "portable", &["data race sometimes"]),
];

fn check_torch_example(file: &str, profile: &str) -> String {
    let (_, _, expected) = TORCH_EXPECTED.iter().find(|(f, p, _)| *f == file && *p == profile).expect("listed");
    let (report, _) = check_file(&format!("examples/torch/{file}"), profile);
    assert_eq!(kinds(&report), *expected, "{}", report.to_text());
    let text = common::without_stats(&report.to_text());
    insta::assert_snapshot!(format!("torch-{}-{profile}", file.trim_end_matches(".ron")), text);
    report.to_text()
}

#[test]
fn torch_nccl_1456_seed_script_is_non_mirrored_first_contact_and_hangs_under_eager() {
    let text = check_torch_example("nccl-1456.ron", "portable");
    assert!(text.contains("rule N7 broken: first contact between"), "{text}");
    assert!(text.contains("(line 16:9)"), "the message names the dist.send line: {text}");
    let text = check_torch_example("nccl-1456.ron", "eager");
    // The first dist.send creates the pair's communicator (lazy init, P2), then hangs setting up its connection.
    assert!(text.contains("r0 main is blocked in #4 send(to r1, tensor, 1953125 KiB, nccl.0:1, torch.p2p.0:1) (line 16:9)"), "{text}");
}

#[test]
fn torch_megatron_batch_p2p_races_before_pr_82450_and_is_clean_since() {
    let text = check_torch_example("megatron-batch-p2p.ron", "portable");
    assert!(text.contains("it was called inside the open NCCL group"), "{text}");
    // Ops lowered from a P2POp carry its position: the line and column of `P2POp(Isend, "act", Next)`.
    // (#5: the batch first creates the default group's communicator, lazily initialised: issue 30.)
    assert!(text.contains("r0 main #5 send(to r1, act, 16 MiB, nccl, world) (line 17:26)"), "{text}");
    // The same script lowered as PyTorch since PR 82450: the end events follow the group end.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/torch/megatron-batch-p2p.ron");
    let since = std::fs::read_to_string(path).unwrap().replace("version: Before82450", "version: Since82450");
    assert_eq!(kinds(&common::check_text("megatron-batch-p2p-since", &since, "portable")), Vec::<String>::new());
}

#[test]
fn torch_new_group_all_to_all_races_before_the_wait_and_is_clean_after() {
    let text = check_torch_example("new-group-all-to-all.ron", "portable");
    // Each group's all-to-all runs on the communicator split from `world` for it (eager init: ncclCommSplit), on
    // the group's own NCCL stream (issue 30).
    assert!(text.contains("all_to_all(tokens -> recv, nccl.group.ep1, torch.group.ep1) (line 24:9)"), "{text}");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/torch/new-group-all-to-all.ron");
    let bug = std::fs::read_to_string(path).unwrap();
    let fixed = bug.replace(
        "        Compute(\"experts\", reads: [\"recv\"], writes: [\"out\"]),\n        WorkWait(\"a2a\"),",
        "        WorkWait(\"a2a\"),\n        Compute(\"experts\", reads: [\"recv\"], writes: [\"out\"]),",
    );
    assert_ne!(fixed, bug);
    assert_eq!(kinds(&common::check_text("new-group-all-to-all-fixed", &fixed, "portable")), Vec::<String>::new());
}

#[test]
fn torch_avoid_record_streams_races_where_record_stream_is_clean() {
    let text = check_torch_example("avoid-record-streams.ron", "portable");
    assert!(text.contains("the caching allocator handed t's freed block to u"), "{text}");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/torch/avoid-record-streams.ron");
    let src = std::fs::read_to_string(path).unwrap();
    let opts = cuorder_model::format::TorchOptions { avoid_record_streams: Some(false), ..Default::default() };
    let p = cuorder_model::format::load_with("avoid-record-streams", &src, &opts).unwrap();
    let r = cuorder::report::check(&p, &cuorder_model::profile::Profile::portable(), &Default::default());
    assert_eq!(kinds(&r), Vec::<String>::new(), "{}", r.to_text());
}

#[test]
fn torch_megatron_batch_p2p_synchronize_is_clean() {
    check_torch_example("megatron-batch-p2p-synchronize.ron", "portable");
    let (r, _) = check_file("examples/torch/megatron-batch-p2p-synchronize.ron", "eager");
    assert_eq!(kinds(&r), Vec::<String>::new(), "{}", r.to_text());
}

#[test]
fn torch_pipeline_1f1b_fits_a_page_and_its_sampled_executions_complete() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/torch/pipeline-1f1b.ron");
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.lines().count() < 60, "the 4-stage 1F1B takes {} lines", text.lines().count());
    let p = cuorder_model::format::load("pipeline-1f1b", &text).unwrap();
    assert_eq!(p.ranks.len(), 4);
    // Every stage computes 4 forwards and 4 backwards, in 1F1B order: stage 0 runs 3 warm-up forwards first.
    for (stage, rank) in p.ranks.iter().enumerate() {
        let kernels: Vec<&str> = rank.threads[0]
            .ops
            .iter()
            .filter_map(|o| match &o.kind {
                cuorder_model::program::OpKind::Kernel { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        let warmup = 3 - stage;
        let mut expected: Vec<String> = (0..warmup).map(|i| format!("fwd{i}")).collect();
        for j in 0..4 - warmup {
            expected.push(format!("fwd{}", warmup + j));
            expected.push(format!("bwd{j}"));
        }
        expected.extend((4 - warmup..4).map(|k| format!("bwd{k}")));
        assert_eq!(kernels, expected, "stage {stage}");
    }
    // Exhaustive search of 4 ranks × ~40 ops does not fit a test; seeded random walks of the model do.
    let prof = cuorder_model::profile::Profile::portable();
    let sem = cuorder_model::semantics::Semantics::new(&p, &prof);
    let opts = cuorder_sim::strategy::SampleOptions { seed: 3, executions: 30, jobs: 1, ..Default::default() };
    let s = cuorder_sim::strategy::sample(&sem, &opts);
    assert_eq!(s.exploration.findings.len(), 0, "{:?}", s.exploration.findings.first().map(|f| f.problem.kind_name()));
    assert_eq!(s.exploration.completed_states, 30);
    // Initialised lazily, the unbatched sends and the batches use different communicators (P2): a hang in
    // connection set-up (N7), in every sampled execution.
    let lazy = cuorder_model::format::load("pipeline-1f1b-lazy", &text.replace("init: Eager", "init: Lazy")).unwrap();
    let sem = cuorder_model::semantics::Semantics::new(&lazy, &prof);
    let s = cuorder_sim::strategy::sample(&sem, &opts);
    let kinds: Vec<&str> = s.exploration.findings.iter().map(|f| f.problem.kind_name()).collect();
    assert_eq!(kinds, ["deadlock"]);
    assert_eq!(s.hits, [30]);
}

#[test]
fn every_torch_example_is_listed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/torch");
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".ron") && name != "pipeline-1f1b.ron" {
            assert!(TORCH_EXPECTED.iter().any(|(f, _, _)| *f == name), "examples/torch/{name} has no expected verdict");
        }
    }
}

fn check_example(file: &str) {
    let (_, expected) = EXPECTED.iter().find(|(f, _)| *f == file).expect("listed");
    let (report, _) = check_file(&format!("examples/{file}"), "portable");
    assert_eq!(kinds(&report), *expected, "{}", report.to_text());
    insta::assert_snapshot!(file.trim_end_matches(".ron"), common::without_stats(&report.to_text()));
}

/// The hang needs collectives to connect at init (N7): the finding says so, with the versions and settings.
#[test]
fn cudafree_through_an_all_reduce_needs_connections_at_init() {
    check_example("cudafree-collective-connect-at-init.ron");
    let (r, _) = check_file("examples/cudafree-collective-connect-at-init.ron", "portable");
    assert_eq!(r.findings[0].finding.platform, Some(cuorder_model::profile::ConnectChoice::Init));
    let (eager, _) = check_file("examples/cudafree-collective-connect-at-init.ron", "eager");
    assert!(eager.findings.is_empty(), "{}", eager.to_text());
}

#[test]
fn nccl_1456_send_first_is_non_mirrored_first_contact() {
    check_example("nccl-1456-send-first.ron");
    let (r, _) = check_file("examples/nccl-1456-send-first.ron", "portable");
    let text = r.to_text();
    assert!(text.contains("rule N7 broken: first contact between"), "{text}");
}

#[test]
fn nccl_1456_send_first_connected_deadlocks_with_the_rendezvous_cycle() {
    check_example("nccl-1456-send-first-connected.ron");
    let (r, _) = check_file("examples/nccl-1456-send-first-connected.ron", "portable");
    let text = r.to_text();
    assert!(text.contains("is queued behind"), "{text}");
    assert!(text.contains("the send may wait for its recv; N2"), "{text}");
    assert!(text.contains("r0 main is blocked in #9 stream_sync(s0)"), "{text}");
    assert!(text.contains("r1 main is blocked in #9 stream_sync(s0)"), "{text}");
    assert!(text.contains("fix: issue the send and the recv to the same peer in one group"), "{text}");
}

#[test]
fn nccl_1456_grouped_completes() {
    check_example("nccl-1456-grouped.ron");
}

#[test]
fn nccl_1456_parity_completes() {
    check_example("nccl-1456-parity.ron");
}

#[test]
fn megatron_batch_p2p_race_is_a_race_on_both_buffers_of_both_ranks() {
    check_example("megatron-batch-p2p-race.ron");
}

#[test]
fn megatron_batch_p2p_fixed_is_clean() {
    check_example("megatron-batch-p2p-fixed.ron");
}

#[test]
fn fixes_also_complete_under_the_eager_profile() {
    for f in ["nccl-1456-grouped.ron", "nccl-1456-parity.ron", "megatron-batch-p2p-fixed.ron"] {
        let (r, _) = check_file(&format!("examples/{f}"), "eager");
        assert_eq!(kinds(&r), Vec::<String>::new(), "{f}: {}", r.to_text());
    }
    // Under eager with lazy connections, the send-first program hangs already at connection set-up (N7).
    let (r, _) = check_file("examples/nccl-1456-send-first.ron", "eager");
    assert_eq!(kinds(&r), vec!["deadlock always"]);
    assert!(r.to_text().contains("not mirrored"), "{}", r.to_text());
}

#[test]
fn cudafree_during_recv_hangs_where_cudafree_synchronizes() {
    check_example("cudafree-during-recv.ron");
    let (r, text) = check_file("examples/cudafree-during-recv.ron", "portable");
    let out = r.to_text();
    assert!(out.contains("r0 main is blocked in #6 cuda_free(scratch) (line 22:17), which waits for r0 s0: #5 recv"), "{out}");
    assert!(out.contains("(S7: the call synchronizes the device implicitly)"), "{out}");
    // The fix the header gives: free once the exchange has ended.
    let fixed = text.replace("Free(\"scratch\"),     // cudaFree: may wait for the recv above\n", "").replace(
        "            StreamSync(\"s0\"),\n        ]),",
        "            StreamSync(\"s0\"),\n            Free(\"scratch\"),\n        ]),",
    );
    assert_ne!(fixed, text);
    assert_eq!(kinds(&common::check_text("cudafree-fixed", &fixed, "portable")), Vec::<String>::new());
}

#[test]
fn launch_queue_full_hangs_with_a_bounded_queue() {
    check_example("launch-queue-full.ron");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/launch-queue-full.ron");
    let p = cuorder_model::format::load("launch-queue-full", &std::fs::read_to_string(path).unwrap()).unwrap();
    let bounded = cuorder_model::profile::Profile { launch_queue_depth: Some(2), ..cuorder_model::profile::Profile::portable() };
    let r = cuorder::report::check(&p, &bounded, &Default::default());
    assert_eq!(kinds(&r), vec!["deadlock always"], "{}", r.to_text());
    insta::assert_snapshot!("launch-queue-full-depth-2", common::without_stats(&r.to_text()));
}

/// N14: the deadlock of group-plan-split.ron comes from the kernel-plan cut alone: with one plan per group (the
/// documented behaviour, `p2p_plan: None`) the program completes; under `eager` (16 MiB is beyond its 4 MiB window,
/// so every send waits for its recv) it hangs in every execution, and the cycle names the plan.
#[test]
fn group_plan_split_hangs_only_through_the_plan_cut() {
    use cuorder_model::profile::Profile;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/group-plan-split.ron");
    let p = cuorder_model::format::load("group-plan-split", &std::fs::read_to_string(path).unwrap()).unwrap();
    let one_plan = Profile { p2p_plan: None, ..Profile::portable() };
    let r = cuorder::report::check(&p, &one_plan, &Default::default());
    assert_eq!(kinds(&r), Vec::<String>::new(), "{}", r.to_text());
    let r = cuorder::report::check(&p, &Profile::eager(), &Default::default());
    assert_eq!(kinds(&r), vec!["deadlock always"], "{}", r.to_text());
    let text = r.to_text();
    // The wait names the plan and the call that keeps the earlier plan open (the send to r2).
    assert!(
        text.contains("which NCCL put in kernel plan 2 of its group; that plan starts only when plan 1 ends, and plan 1 still waits for #11 send(to r2"),
        "{text}"
    );
    assert!(text.contains("NCCL cuts a large group into kernel plans"), "{text}");
    assert!(text.contains("Megatron-LM PR 7189"), "{text}");
    let eager_one_plan = Profile { p2p_plan: None, ..Profile::eager() };
    assert_eq!(kinds(&cuorder::report::check(&p, &eager_one_plan, &Default::default())), Vec::<String>::new());
}

/// Issue 30: the model filled a cut group's kernel plans only in NCCL >= 2.29.7's order (each plan continuing where
/// the previous was cut) and said "no problem" for group-plan-order-restart.ron, which hangs with NCCL 2.28's (each
/// plan restarting at round 0). `portable` explores both orders, and each hang says which one it needs; a profile
/// that fixes the order sees only its own hang.
#[test]
fn a_hang_under_nccl_2_28s_plan_order_was_reported_clean() {
    use cuorder_model::profile::{PlanOrder, PlanOrderChoice, Profile};
    for (file, needs) in
        [("group-plan-order-restart.ron", PlanOrderChoice::Restart), ("group-plan-order-continue.ron", PlanOrderChoice::Continue)]
    {
        check_example(file);
        let (r, _) = check_file(&format!("examples/{file}"), "portable");
        assert_eq!(r.findings[0].finding.plan_order, Some(needs), "{file}");
        assert_eq!(r.findings[0].finding.platform, None, "{file}");
        let text = r.to_text();
        assert!(text.contains(&format!("platform: only in executions with {} (N14)", needs.words())), "{text}");
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(file);
        let p = cuorder_model::format::load(file, &std::fs::read_to_string(path).unwrap()).unwrap();
        for (order, hangs) in [(PlanOrder::Restart, needs == PlanOrderChoice::Restart), (PlanOrder::Continue, needs == PlanOrderChoice::Continue)] {
            let fixed = Profile { p2p_plan_order: order, ..Profile::portable() };
            let r = cuorder::report::check(&p, &fixed, &Default::default());
            let expect: Vec<String> = if hangs { vec!["deadlock sometimes".into()] } else { vec![] };
            assert_eq!(kinds(&r), expect, "{file} under {order:?}: {}", r.to_text());
            // A profile that fixes the order leaves nothing to the platform.
            assert!(r.findings.iter().all(|f| f.finding.plan_order.is_none()), "{file}");
        }
    }
}

#[test]
fn every_example_is_listed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".ron") {
            assert!(EXPECTED.iter().any(|(f, _)| *f == name), "examples/{name} has no expected verdict in tests/examples.rs");
        }
    }
}
