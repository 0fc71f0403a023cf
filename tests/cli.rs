//! The `cuorder` binary end to end: exit codes, diagnostics for bad input (file:line:column, no panic),
//! JSON output, and determinism of traces (same program and seed, byte-identical trace).

use std::path::PathBuf;
use std::process::Command;

fn cuorder(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cuorder"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs");
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cuorder-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn send_first_exits_1_and_explains_the_cycle() {
    let (code, out, _) = cuorder(&["check", "examples/nccl-1456-send-first-connected.ron"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("deadlock (in some executions)"), "{out}");
    assert!(out.contains("wait-for cycle"), "{out}");
    let (code, out, _) = cuorder(&["check", "examples/nccl-1456-send-first.ron"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("rule N7 broken"), "{out}");
}

#[test]
fn fixes_exit_0_and_race_exits_1() {
    for (f, want) in [
        ("examples/nccl-1456-grouped.ron", 0),
        ("examples/nccl-1456-parity.ron", 0),
        ("examples/megatron-batch-p2p-fixed.ron", 0),
        ("examples/megatron-batch-p2p-race.ron", 1),
    ] {
        let (code, out, err) = cuorder(&["check", f]);
        assert_eq!(code, want, "{f}: {out}{err}");
    }
}

#[test]
fn truncated_program_exits_2_with_position_and_no_panic() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/nccl-1456-send-first.ron")).unwrap();
    let cut = &text[..text.len() * 2 / 3];
    let path = tmp("truncated.ron");
    std::fs::write(&path, cut).unwrap();
    let (code, _, err) = cuorder(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{}:", path.display())), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn misspelled_op_exits_2_with_line_and_column() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/nccl-1456-send-first.ron")).unwrap();
    let bad = text.replace("StreamSync(\"s0\")", "StreamSynch(\"s0\")");
    let path = tmp("misspelled.ron");
    std::fs::write(&path, bad).unwrap();
    let (code, _, err) = cuorder(&["check", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    let line = text.lines().position(|l| l.contains("StreamSync(\"s0\")")).unwrap() + 1;
    assert!(err.contains(&format!("{}:{line}:", path.display())), "{err}");
}

#[test]
fn unknown_profile_and_missing_file_exit_2() {
    let (code, _, err) = cuorder(&["check", "examples/nccl-1456-grouped.ron", "--profile", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown profile"), "{err}");
    let (code, _, err) = cuorder(&["check", "examples/does-not-exist.ron"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn json_output_parses_and_has_the_verdict() {
    let (code, out, _) = cuorder(&["check", "examples/nccl-1456-send-first-connected.ron", "--format", "json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["verdict"], "deadlock");
    assert_eq!(v["findings"][0]["frequency"], "sometimes");
}

#[test]
fn same_program_and_seed_give_byte_identical_traces() {
    let (a, b, c) = (tmp("a.ron"), tmp("b.ron"), tmp("c.ron"));
    for (p, seed) in [(&a, "7"), (&b, "7"), (&c, "8")] {
        let (code, _, err) = cuorder(&["run", "examples/megatron-batch-p2p-race.ron", "--seed", seed, "--trace", p.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
    }
    let (ta, tb, tc) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), std::fs::read(&c).unwrap());
    assert_eq!(ta, tb, "same seed, different traces");
    assert_ne!(ta, tc, "different seeds gave the same trace: the seed is not used");
}

#[test]
fn witness_replays_to_the_deadlock() {
    let (code, out, err) = cuorder(&["run", "examples/nccl-1456-send-first-connected.ron", "--witness", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("outcome: deadlock"), "{out}");
}

/// `run --backend hw` runs on GPUs and checks the observation; on a machine without a GPU it says so and exits 3.
#[test]
fn run_on_hardware_says_when_there_is_no_gpu() {
    let (code, out, err) = cuorder(&["run", "examples/nccl-1456-grouped.ron", "--backend", "hw", "--timeout-s", "20"]);
    match code {
        3 => {
            assert!(err.contains("cannot run on hardware here"), "{err}");
            eprintln!("skipped: no GPU on this machine ({})", err.trim());
        }
        0 => assert!(out.contains("agrees"), "{out}"),
        _ => panic!("exit {code}: {out}{err}"),
    }
}

#[test]
fn explain_prints_a_rule_and_rejects_an_unknown_one() {
    let (code, out, _) = cuorder(&["explain", "n7"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("## N7:"), "{out}");
    let (code, out, _) = cuorder(&["explain"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), cuorder_model::rule::Rule::ALL.len(), "{out}");
    let (code, _, err) = cuorder(&["explain", "Z9"]);
    assert_eq!(code, 2);
    assert!(err.contains("no rule") && err.contains("N11"), "{err}");
}

#[test]
fn profile_says_what_it_assumes_in_plain_words() {
    let (code, out, _) = cuorder(&["profile", "portable"]);
    assert_eq!(code, 0);
    assert!(out.contains("assumes:") && out.contains("both are explored"), "{out}");
    assert!(out.contains("N7 connections: set up lazily"), "{out}");
}

#[test]
fn explore_saves_findings_that_replay_byte_for_byte() {
    let (a, b) = (tmp("explore-a"), tmp("explore-b"));
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
    let args = |dir: &PathBuf, jobs: &'static str| {
        vec!["explore".to_string(), "examples/nccl-1456-send-first-connected.ron".into(), "--strategy".into(), "pct".into(),
             "--executions".into(), "30".into(), "--seed".into(), "5".into(), "--jobs".into(), jobs.into(), "--save".into(), dir.display().to_string()]
    };
    let run = |v: Vec<String>| cuorder(&v.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    let (code_a, out_a, err_a) = run(args(&a, "1"));
    assert_eq!(code_a, 1, "{out_a}{err_a}");
    assert!(out_a.contains("deadlock"), "{out_a}");
    let (code_b, out_b, _) = run(args(&b, "2"));
    assert_eq!(code_b, 1);
    // Same seed, any --jobs: the same report and the same artifacts, byte for byte.
    assert_eq!(out_a.replace(&a.display().to_string(), "DIR"), out_b.replace(&b.display().to_string(), "DIR"));
    let mut files: Vec<_> = std::fs::read_dir(&a).unwrap().map(|e| e.unwrap().file_name()).collect();
    files.sort();
    assert!(!files.is_empty());
    for f in &files {
        assert_eq!(std::fs::read(a.join(f)).unwrap(), std::fs::read(b.join(f)).unwrap(), "{f:?} differs");
        let path = a.join(f).display().to_string();
        let (code, out1, err) = cuorder(&["replay", &path]);
        assert_eq!(code, 0, "{out1}{err}");
        assert!(out1.contains("reproduced:"), "{out1}");
        let (_, out2, _) = cuorder(&["replay", &path]);
        assert_eq!(out1, out2, "replay is not deterministic");
    }
    // A schedule that no longer fits says where it diverged.
    let first = a.join(&files[0]);
    let text = std::fs::read_to_string(&first).unwrap();
    let mut art: cuorder::artifact::Artifact = ron::from_str(&text).unwrap();
    art.schedule.swap(0, 1);
    art.schedule.insert(0, cuorder_model::semantics::Step::Collective { comm: cuorder_model::program::CommId(0), seq: 99 });
    std::fs::write(&first, ron::ser::to_string_pretty(&art, ron::ser::PrettyConfig::default()).unwrap()).unwrap();
    let (code, out, _) = cuorder(&["replay", &first.display().to_string()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("diverged at step 0"), "{out}");
    // Not an artifact: a located error, exit 2.
    let (code, _, err) = cuorder(&["replay", "examples/nccl-1456-grouped.ron"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a finding artifact"), "{err}");
}

#[test]
fn a_clean_sampled_exploration_is_not_a_proof() {
    let (code, out, _) = cuorder(&["explore", "examples/nccl-1456-grouped.ron", "--executions", "10"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("sampled 10 executions"), "{out}");
    assert!(!out.contains("in any execution"), "{out}");
}
