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
];

fn check_example(file: &str) {
    let (_, expected) = EXPECTED.iter().find(|(f, _)| *f == file).expect("listed");
    let (report, _) = check_file(&format!("examples/{file}"), "portable");
    assert_eq!(kinds(&report), *expected, "{}", report.to_text());
    insta::assert_snapshot!(file.trim_end_matches(".ron"), common::without_stats(&report.to_text()));
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
fn every_example_is_listed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".ron") {
            assert!(EXPECTED.iter().any(|(f, _)| *f == name), "examples/{name} has no expected verdict in tests/examples.rs");
        }
    }
}
