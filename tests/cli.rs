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
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["check"]["verdict"], "deadlock");
    assert_eq!(v["check"]["findings"][0]["frequency"], "sometimes");
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
    assert!(out.contains("N7 connections: P2P connections are set up lazily") && out.contains("collectives connect either way"), "{out}");
    // The output is a profile file as it is: the plain words are RON comments (it failed to load at 1:8).
    for name in ["portable", "eager"] {
        let (_, text, _) = cuorder(&["profile", name]);
        let f = tmp(&format!("{name}-copy.ron"));
        std::fs::write(&f, &text).unwrap();
        let (code, _, err) = cuorder(&["check", "examples/nccl-1456-grouped.ron", "--profile", f.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: {err}");
    }
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
    // A program where a finding was expected says where findings come from (it printed serde's words alone).
    assert!(err.contains("is a program; save its findings with `cuorder explore examples/nccl-1456-grouped.ron"), "{err}");
    let (code, _, err) = cuorder(&["shrink", "examples/nccl-1456-grouped.ron"]);
    assert_eq!(code, 2);
    assert!(err.contains("is a program; save its findings"), "{err}");
}

/// Regression (issue 10 review): a race every sampled execution showed was reported "in some executions". Sampling
/// says how many samples had it; only the exhaustive search says "in every execution".
#[test]
fn sampled_findings_say_how_many_samples_had_them() {
    let (code, out, _) = cuorder(&["explore", "examples/torch/megatron-batch-p2p.ron", "--torch-version", "before82450", "--executions", "40"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("4 data races (in all 40 sampled executions)"), "{out}");
    assert!(!out.contains("in some executions") && !out.contains("in every execution"), "{out}");
    let (_, out, _) = cuorder(&["explore", "examples/nccl-1456-send-first-connected.ron", "--executions", "50"]);
    let line = out.lines().find(|l| l.starts_with("nccl-1456-send-first-connected: deadlock (in ")).expect("a headline");
    assert!(line.ends_with(" of 50 sampled executions)"), "{out}");
}

#[test]
fn a_clean_sampled_exploration_is_not_a_proof() {
    let (code, out, _) = cuorder(&["explore", "examples/nccl-1456-grouped.ron", "--executions", "10"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("sampled 10 executions"), "{out}");
    assert!(!out.contains("in any execution"), "{out}");
}

fn cuorder_in(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cuorder"));
    c.args(args).current_dir(dir);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A traces folder: `good/` (two traces that agree, a profile two folders up), `bad/` (a truncated trace, an empty
/// trace, a non-UTF-8 trace, a trace whose program is missing, a trace of another program), `nomanifest/` (a trace
/// in no manifest), `broken/` (a truncated manifest) and a symlink loop.
fn traces_folder(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("cuorder-cli-dir-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let smoke = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/hw/smoke");
    let mk = |d: &str| {
        std::fs::create_dir_all(root.join(d).join("programs")).unwrap();
        root.join(d)
    };
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/profiles/h200x2-nvlink-nccl2.28.3.ron"),
        root.join("profiles/hw.ron"),
    )
    .unwrap();
    let copy = |dir: &PathBuf, t: &str, as_: &str| {
        std::fs::copy(smoke.join(format!("{t}.ron")), dir.join(format!("{as_}.ron"))).unwrap();
        std::fs::copy(smoke.join(format!("programs/{t}.ron")), dir.join(format!("programs/{as_}.ron"))).unwrap();
    };
    let good = mk("good");
    std::fs::write(good.join("MANIFEST.ron"), "Manifest(profile: \"profiles/hw.ron\")\n").unwrap();
    copy(&good, "kernel_write_read", "kernel_write_read");
    copy(&good, "sendrecv_grouped_1mib", "sendrecv_grouped_1mib");
    root
}

fn add_bad_files(root: &std::path::Path) {
    let smoke = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/hw/smoke");
    let trace = std::fs::read(smoke.join("kernel_write_read.ron")).unwrap();
    let program = std::fs::read(smoke.join("programs/kernel_write_read.ron")).unwrap();
    let bad = root.join("bad");
    std::fs::create_dir_all(bad.join("programs")).unwrap();
    std::fs::write(bad.join("MANIFEST.ron"), "Manifest(profile: \"profiles/hw.ron\")\n").unwrap();
    for (stem, bytes) in [
        ("truncated", trace[..trace.len() / 2].to_vec()),
        ("empty", vec![]),
        ("latin1", [&trace[..20], b"\xe9\xff", &trace[20..]].concat()),
        ("renamed", String::from_utf8(trace.clone()).unwrap().replace("program: \"kernel_write_read\"", "program: \"other\"").into_bytes()),
    ] {
        std::fs::write(bad.join(format!("{stem}.ron")), bytes).unwrap();
        std::fs::write(bad.join(format!("programs/{stem}.ron")), &program).unwrap();
    }
    std::fs::write(bad.join("no-program.ron"), &trace).unwrap();
    std::fs::create_dir_all(root.join("nomanifest")).unwrap();
    std::fs::write(root.join("nomanifest/orphan.ron"), &trace).unwrap();
    std::fs::create_dir_all(root.join("broken")).unwrap();
    std::fs::write(root.join("broken/MANIFEST.ron"), "Manifest(profile: ").unwrap();
    std::fs::write(root.join("broken/kernel_write_read.ron"), &trace).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(root, root.join("good/loop")).unwrap();
}

#[test]
fn conform_dir_passes_on_good_traces_from_any_directory() {
    let root = traces_folder("good");
    // From another directory, with an absolute --dir; the profile is found above the manifest's folder.
    let (code, out, err) = cuorder_in(std::path::Path::new("/"), &["conform", "--dir", root.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("good/kernel_write_read.ron: agrees"), "{out}");
    assert!(out.ends_with("2 files: 2 agrees; gate passed\n"), "{out}");
}

#[test]
fn conform_dir_reports_every_bad_file_checks_the_rest_and_fails() {
    let root = traces_folder("bad");
    add_bad_files(&root);
    let junit = root.join("report.xml");
    let (code, out, err) = cuorder_in(&root, &["conform", "--dir", ".", "--junit", junit.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(!err.contains("panicked"), "{err}");
    for want in [
        "good/kernel_write_read.ron: agrees",
        "good/sendrecv_grouped_1mib.ron: agrees",
        "bad/truncated.ron: ERROR",
        "bad/empty.ron: ERROR",
        "bad/latin1.ron: ERROR (error: ./bad/latin1.ron:2:8: the file is not valid UTF-8)",
        "bad/no-program.ron: ERROR (error: ./bad/programs/no-program.ron: cannot read",
        "bad/renamed.ron: ERROR (error: ./bad/renamed.ron: the observation is of program `other`, not `kernel_write_read`)",
        "nomanifest/orphan.ron: NOT CHECKED (no MANIFEST.ron in its folder)",
        "broken/MANIFEST.ron: ERROR",
        "broken/kernel_write_read.ron: ERROR (not checked: error: ./broken/MANIFEST.ron:1:19",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    // The symlink loop is entered once: the good traces appear once each.
    assert_eq!(out.matches("kernel_write_read.ron: agrees").count(), 1, "{out}");
    assert!(out.contains("gate FAILED"), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let rep = quick_junit::Report::deserialize_from_str(&xml).expect("JUnit XML reads back");
    assert_eq!(rep.tests, 10, "{xml}");
    assert!(rep.errors >= 8, "{xml}");
    assert!(xml.contains("<testcase name=\"good/kernel_write_read.ron\" classname=\"good\"/>"), "{xml}");
}

/// Regression (new-user trial, 2026-12-03): `conform PROGRAM TRACE` under a budget too small to reach the observed
/// outcome printed "disagrees ... the model's executions end only as: " (an empty list) and exited 1, a wrong
/// verdict: the executions explored were only a part. It is inconclusive (exit 3, as for `check`), and the same trace
/// agrees once the budget lets the search finish.
#[test]
fn conform_reported_a_budget_stop_as_a_disagreement() {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let smoke = here.join("traces/hw/smoke");
    let args = |budget: &'static str| {
        [
            "conform".to_string(),
            smoke.join("programs/sendrecv_grouped_1mib.ron").display().to_string(),
            smoke.join("sendrecv_grouped_1mib.ron").display().to_string(),
            "--profile".into(),
            here.join("traces/profiles/h200x2-nvlink-nccl2.28.3.ron").display().to_string(),
            "--max-states".into(),
            budget.into(),
        ]
    };
    let run = |budget| {
        let a = args(budget);
        cuorder_in(here, &a.iter().map(String::as_str).collect::<Vec<_>>(), &[])
    };
    let (code, out, _) = run("2");
    assert_eq!(code, 3, "{out}");
    assert!(out.starts_with("inconclusive: the search stopped before the model's executions showed this observation"), "{out}");
    assert!(!out.contains("disagrees"), "{out}");
    let (code, out, _) = run("200000");
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("agrees:"), "{out}");
}

#[test]
fn conform_dir_fails_on_unexplained_inconclusive_results() {
    let root = traces_folder("inconclusive");
    let (code, out, _) = cuorder_in(&root, &["conform", "--dir", ".", "--max-states", "2"], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("INCONCLUSIVE (not explained in the manifest)"), "{out}");
    // Explained in the manifest: the gate passes.
    std::fs::write(
        root.join("good/MANIFEST.ron"),
        "Manifest(profile: \"profiles/hw.ron\", expect_disagree: {\"kernel_write_read\": \"tiny budget\", \"sendrecv_grouped_1mib\": \"tiny budget\"})\n",
    )
    .unwrap();
    let (code, out, _) = cuorder_in(&root, &["conform", "--dir", ".", "--max-states", "2"], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("explained inconclusive (tiny budget)"), "{out}");
}

#[test]
fn color_follows_the_flag_and_no_color() {
    let bad = tmp("color.ron");
    std::fs::write(&bad, "Program(ranks: 1, threads: [Thread(\"main\", [Kernal(\"k\")])])\n").unwrap();
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let p = bad.to_str().unwrap();
    let (_, _, always) = cuorder_in(here, &["check", p, "--color", "always"], &[("NO_COLOR", "1")]);
    assert!(always.contains("\x1b["), "--color always wins over NO_COLOR: {always}");
    let (_, _, never) = cuorder_in(here, &["check", p, "--color", "never"], &[]);
    assert!(!never.contains("\x1b["), "{never}");
    let (_, _, auto) = cuorder_in(here, &["check", p], &[("NO_COLOR", "1")]);
    assert!(!auto.contains("\x1b["), "{auto}");
}

#[test]
fn help_lists_the_exit_codes() {
    let (code, out, _) = cuorder(&["--help"]);
    assert_eq!(code, 0);
    for want in ["Exit codes:", "  0  no problem", "  1  a problem", "  2  bad input", "  3  inconclusive"] {
        assert!(out.contains(want), "{out}");
    }
}

/// Reviewers found `--strategy bounded` unclear: its help names the method, says what the bound counts, and gives
/// the default (the literal in the strategy's help is the constant's value).
#[test]
fn bounded_strategy_help_says_what_the_bound_counts_and_its_default() {
    let (code, out, _) = cuorder(&["explore", "--help"]);
    assert_eq!(code, 0);
    let default = cuorder_sim::explore::DEFAULT_BOUND;
    for want in [
        format!("bounded:    Preemption-bounded exhaustive search (CHESS): every execution with at most --bound preemptions (default {default})"),
        "A preemption is a step of another agent (a host thread, a stream, a communicator's collective)".to_string(),
        format!("[default: {default}]"),
    ] {
        assert!(out.contains(&want), "no `{want}` in:\n{out}");
    }
}

#[test]
fn completions_and_man_page_are_generated() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = cuorder(&["completions", shell]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("conform") && out.contains("max-memory-mb"), "{shell}: {out}");
    }
    let (code, out, _) = cuorder(&["completions", "tcsh"]);
    assert_eq!(code, 2, "{out}");
    let (code, out, err) = cuorder(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(".ie") || out.contains(".TH cuorder"), "{}", &out[..out.len().min(300)]);
    assert!(out.contains("Exit codes"), "the man page lists the exit codes");
}

/// A profile file is the user's word: a misspelt knob (`launch_blockin`) used to be ignored, leaving the default in
/// force and the verdict wrong without a word; a queue of depth 0 or a guaranteed synchronization wider than the
/// possible one made every program hang or was silently reinterpreted. All three are load errors now (exit 2).
#[test]
fn profile_files_with_unknown_or_meaningless_knobs_are_refused() {
    let base = cuorder(&["profile", "portable"]).1;
    let ron_start = base.find("\n(\n").expect("the profile's RON follows its description");
    let ron = &base[ron_start + 1..];
    let write = |name: &str, text: String| {
        let p = tmp(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let typo = write("typo-profile.ron", ron.replacen("launch_blocking:", "launch_blockin:", 1));
    let (code, _, err) = cuorder(&["check", "examples/cudafree-during-recv.ron", "--profile", typo.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("launch_blockin"), "{err}");
    let zero = write("zero-queue.ron", ron.replacen("launch_queue_depth: None", "launch_queue_depth: Some(0)", 1));
    let (code, _, err) = cuorder(&["check", "examples/launch-queue-full.ron", "--profile", zero.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("launch_queue_depth: Some(0)"), "{err}");
    let wide = ron.replacen("guaranteed: None,\n            possible: Device", "guaranteed: AllDevices,\n            possible: None", 1);
    assert_ne!(wide, ron, "the free knob is written as expected");
    let wide = write("wide-free.ron", wide);
    let (code, _, err) = cuorder(&["check", "examples/cudafree-during-recv.ron", "--profile", wide.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("implicit_sync.free: guaranteed AllDevices is wider than possible None"), "{err}");
}

/// `explore` takes the PyTorch dialect's settings like `check` (issue 10: it lacked them), records them in the
/// saved artifact, and `replay` loads the program with them: megatron-batch-p2p.ron races with the end events
/// inside the group (before PR 82450) and replays; since PR 82450 it is clean.
#[test]
fn explore_takes_torch_settings_and_replay_reuses_them() {
    let dir = tmp("explore-torch");
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.display().to_string();
    let base = ["explore", "examples/torch/megatron-batch-p2p.ron", "--strategy", "random", "--executions", "20", "--jobs", "1"];
    let mut before: Vec<&str> = base.to_vec();
    before.extend(["--torch-version", "before82450", "--save", &d]);
    let (code, out, err) = cuorder(&before);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("--torch-version before82450"), "{out}");
    assert!(out.contains("data race"), "{out}");
    let mut since: Vec<&str> = base.to_vec();
    since.extend(["--torch-version", "since82450"]);
    let (code, out, err) = cuorder(&since);
    assert_eq!(code, 3, "a clean sampled run exits 3: {out}{err}");
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(!files.is_empty());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(text.contains("version: Some(Before82450)"), "{text}");
        let (code, out, err) = cuorder(&["replay", &f.display().to_string()]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("reproduced:"), "{out}");
        // Review: the race's summary ("on r0 grad (device memory):") used to end the line with a colon.
        let line = out.lines().find(|l| l.starts_with("reproduced:")).unwrap();
        assert!(!line.ends_with(':'), "{line}");
    }
}

/// Regression (issue 10 review): a size in the wrong unit ("500 TiB" for "500 MiB") loaded without a word. It still
/// loads and is checked, but stderr warns that no GPU holds it; a program that fits gets no warning.
#[test]
fn device_buffers_no_gpu_can_hold_are_warned_about() {
    let big = tmp("big.ron");
    std::fs::write(
        &big,
        r#"Program(ranks: 2, streams: [Stream("s", NonBlocking)], buffers: [Buffer("x", "500 TiB")],
  threads: [Thread("main", [Kernel("k", stream: "s", writes: ["x"]), DeviceSync])])"#,
    )
    .unwrap();
    let (code, out, err) = cuorder(&["check", big.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(err.matches("warning:").count(), 1, "{err}");
    assert!(err.contains("every rank's device buffers add up to 500.0 TiB, more than any GPU has (288 GB)"), "{err}");
    let (_, _, err) = cuorder(&["check", "examples/nccl-1456-send-first-connected.ron"]);
    assert!(!err.contains("warning"), "{err}");
}

/// Regression (issue 10 review): an artifact replayed from another folder, or after its program moved or changed,
/// needed `--program`. The artifact now holds the program's text and replays exactly from anywhere; a changed file
/// is reported and the saved text used; `--program` still picks the file.
#[test]
fn a_saved_finding_replays_after_its_program_moved_or_changed() {
    let dir = tmp("moved");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("work")).unwrap();
    let program = dir.join("work/send-first.ron");
    std::fs::copy("examples/nccl-1456-send-first-connected.ron", &program).unwrap();
    let saved = dir.join("findings");
    let (code, out, err) = cuorder_in(
        &dir.join("work"),
        &["explore", "send-first.ron", "--executions", "20", "--first", "--save", saved.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 1, "{out}{err}");
    let artifact = std::fs::read_dir(&saved).unwrap().next().unwrap().unwrap().path();
    let art = cuorder::artifact::load(&artifact).unwrap();
    assert_eq!(art.program_text.as_deref(), Some(std::fs::read_to_string(&program).unwrap().as_str()));
    // From another folder, the program gone.
    std::fs::remove_file(&program).unwrap();
    let (code, out, err) = cuorder_in(&dir, &["replay", artifact.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("reproduced: deadlock"), "{out}");
    assert!(!err.contains("warning"), "{err}");
    // The program back, changed so that it no longer deadlocks: the saved text is replayed, with a warning.
    std::fs::copy("examples/nccl-1456-grouped.ron", &program).unwrap();
    let (code, out, err) = cuorder_in(&dir.join("work"), &["replay", artifact.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("changed since the finding was saved; replaying the program saved in"), "{err}");
    // --program uses the file: the schedule no longer fits it.
    let (code, out, _) = cuorder_in(&dir.join("work"), &["replay", artifact.to_str().unwrap(), "--program", "send-first.ron"], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("diverged") || out.contains("not reproduced"), "{out}");
}

/// `explore --strategy bounded`: systematic, so the same bytes every time; each finding says the bound at which it
/// first appeared, and a saved one replays; a clean bounded search proves nothing beyond its bound and exits 3.
#[test]
fn bounded_exploration_reports_bounds_and_its_findings_replay() {
    let dir = tmp("explore-bounded");
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.display().to_string();
    let args = ["explore", "examples/nccl-1456-send-first-connected.ron", "--strategy", "bounded", "--bound", "1"];
    let (code, out, err) = cuorder(&args);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.starts_with("strategy bounded (bound 1), at most 1 preemption: "), "{out}");
    assert!(out.contains("finding 1 first at bound 1 (an execution with 1 preemption shows it)"), "{out}");
    assert!(out.contains("deadlock"), "{out}");
    assert!(out.contains("executions with at most 1 preemption"), "{out}");
    let mut saving = args.to_vec();
    saving.extend(["--save", &d]);
    let (code, out2, _) = cuorder(&saving);
    assert_eq!(code, 1);
    assert_eq!(out.lines().next(), out2.lines().next(), "same bound, same search");
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(!files.is_empty());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(text.contains("strategy: \"bounded (bound 1)\""), "{text}");
        let (code, out, err) = cuorder(&["replay", &f.display().to_string()]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("reproduced:"), "{out}");
    }
    // Clean, and bound 2 cut nothing: the search was complete (a new user's review: it said "inconclusive"). (Bound 1
    // sufficed while a kernel issued before its device's first launch was wrongly taken alone; issue 8 review.)
    let (code, out, _) = cuorder(&["explore", "examples/nccl-1456-grouped.ron", "--strategy", "bounded"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("bound 2 cut no execution") && out.contains("no deadlock, data race or undefined behaviour"), "{out}");
    // Clean up to a bound that cut executions: proves nothing beyond it.
    let (code, out, _) = cuorder(&["explore", "examples/nccl-1456-grouped.ron", "--strategy", "bounded", "--bound", "0"]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("inconclusive") && out.contains("at most 0 preemptions"), "{out}");
    let (code, _, err) = cuorder(&["explore", "examples/nccl-1456-grouped.ron", "--strategy", "bounded", "--bound", "65"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = cuorder(&["explore", "examples/nccl-1456-grouped.ron", "--time-limit", "-1"]);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// The progress bar goes to stderr only: `--progress always` draws it even into a pipe, and stdout is the same bytes
/// as with `--progress never`; by default (stderr not a terminal here) nothing is drawn.
#[test]
fn progress_goes_to_stderr_and_never_changes_stdout() {
    for args in [
        vec!["check", "examples/nccl-1456-send-first-connected.ron"],
        vec!["explore", "examples/nccl-1456-send-first-connected.ron", "--strategy", "pct", "--executions", "50", "--jobs", "2"],
        vec!["explore", "examples/nccl-1456-send-first-connected.ron", "--strategy", "bounded"],
    ] {
        let with = |mode: &str| {
            let mut a = args.clone();
            a.extend(["--progress", mode]);
            cuorder(&a)
        };
        let (code_never, out_never, err_never) = with("never");
        let (code_always, out_always, err_always) = with("always");
        let (code_auto, out_auto, err_auto) = cuorder(&args);
        assert_eq!((code_never, code_always, code_auto), (1, 1, 1), "{args:?}");
        assert_eq!(out_never, out_always, "{args:?}: the progress bar changed stdout");
        assert_eq!(out_never, out_auto, "{args:?}");
        assert_eq!(err_never, "", "{args:?}");
        assert_eq!(err_auto, "", "{args:?}: drew a progress bar into a pipe");
        let unit = if args.contains(&"pct") { "executions" } else { "states" };
        assert!(err_always.contains(unit), "{args:?}: no progress on stderr: {err_always:?}");
    }
}

/// Runs `cuorder ARGS` (in the repository root, stdout and stderr piped), sends it SIGINT once `ready` holds of
/// the stderr written so far (the progress bar has drawn: the Ctrl-C handler is installed before it draws, and a
/// SIGINT before that kills the process) and half a second more has passed, and returns its exit code, stdout and
/// stderr. Panics if it is not ready within 120 s or takes more than 150 s in all.
#[cfg(unix)]
fn interrupted(args: &[&str], ready: impl Fn(&str) -> bool) -> (i32, String, String) {
    let started = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cuorder"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let mut pipe = child.stderr.take().expect("stderr piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut all = vec![];
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
            let _ = tx.send(String::from_utf8_lossy(&all).into_owned());
        }
        String::from_utf8_lossy(&all).into_owned()
    });
    // Drained in the background: a command that fills the stdout pipe would block before it is ready.
    let mut out_pipe = child.stdout.take().expect("stdout piped");
    let out_reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut all = vec![];
        let _ = out_pipe.read_to_end(&mut all);
        String::from_utf8_lossy(&all).into_owned()
    });
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(so_far) if ready(&so_far) => break,
            Ok(_) => {}
            Err(_) => {
                // Not left running (and writing) after the test.
                let _ = child.kill();
                panic!("{args:?}: not ready");
            }
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill runs");
    assert!(killed.success());
    let status = child.wait().expect("waits");
    let elapsed = started.elapsed();
    let (stdout, stderr) = (out_reader.join().expect("stdout reader"), reader.join().expect("stderr reader"));
    assert!(elapsed < std::time::Duration::from_secs(150), "{args:?}: took {elapsed:?} to stop");
    (status.code().unwrap_or(-1), stdout, stderr)
}

/// Writes `cuorder gen pipeline ARGS` to the temporary file `name` and returns its path.
#[cfg(unix)]
fn gen_pipeline(name: &str, args: &[&str]) -> String {
    let p = tmp(name).display().to_string();
    let mut all = vec!["gen", "pipeline"];
    all.extend(args);
    all.extend(["-o", p.as_str()]);
    let (code, _, err) = cuorder(&all);
    assert_eq!(code, 0, "{err}");
    p
}

/// Ctrl-C (SIGINT) stops a long search: what was found so far is printed with "interrupted by Ctrl-C" as the limit
/// that stopped it, and the exit code is the one of a limit (3 with nothing found).
#[cfg(unix)]
#[test]
fn ctrl_c_stops_the_search_and_prints_the_report() {
    let p = gen_pipeline("ctrl-c-1f1b-64x64.ron", &["--schedule", "1f1b", "--stages", "64", "--microbatches", "64"]);
    // Exhaustive check of 1F1B 64x64 runs for minutes (README); 200,000 executions of PCT for longer than a second.
    for args in [vec!["--progress", "always", "check", p.as_str()], vec!["--progress", "always", "explore", p.as_str(), "--strategy", "pct", "--executions", "200000", "--jobs", "1"]] {
        let (code, stdout, stderr) = interrupted(&args, |_| true);
        assert_eq!(code, 3, "{args:?}: {stdout}{stderr}");
        assert!(stdout.contains("interrupted by Ctrl-C"), "{args:?}: {stdout}");
        assert!(stdout.contains("inconclusive"), "{args:?}: {stdout}");
        assert!(stderr.contains("interrupted: stopping the search"), "{args:?}: {stderr}");
    }
}

/// Regression (issue 33): `gen pipeline` into a closed pipe (`| head -1`) exited 2 with "Broken pipe" on stderr; a
/// closed stdout is a normal end, as for every other command: exit 0, nothing on stderr. (Into /dev/full, a write
/// error that is no closed pipe, it still fails with exit 2.)
#[cfg(unix)]
#[test]
fn gen_pipeline_into_a_closed_pipe_exited_2() {
    // 64 x 64 unrolled is megabytes: far more than a pipe holds, so the write fails whenever the reader closes.
    let mut child = Command::new(env!("CARGO_BIN_EXE_cuorder"))
        .args(["gen", "pipeline", "--schedule", "1f1b", "--stages", "64", "--microbatches", "64", "--unroll"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("waits");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    if let Ok(full) = std::fs::File::create("/dev/full") {
        let out = Command::new(env!("CARGO_BIN_EXE_cuorder"))
            .args(["gen", "pipeline", "--schedule", "1f1b", "--stages", "4", "--microbatches", "4"])
            .stdout(full)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write the program"));
    }
}

/// Regression (issue 33): the profile stored in a saved finding was never validated, so `replay` and `shrink` ran
/// under a launch queue of depth 0, which `--profile` refuses. It is checked on load: exit 2, and the error says why.
#[test]
fn artifact_profile_with_queue_depth_0_was_replayed() {
    let dir = tmp("queue-depth-0");
    let d = dir.display().to_string();
    let (code, out, err) = cuorder(&["explore", "examples/megatron-batch-p2p-race.ron", "--executions", "5", "--first", "--save", &d]);
    assert_eq!(code, 1, "{out}{err}");
    let path = dir.join("finding-1-data-race.ron");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("launch_queue_depth: None"), "{text}");
    std::fs::write(&path, text.replacen("launch_queue_depth: None", "launch_queue_depth: Some(0)", 1)).unwrap();
    let p = path.display().to_string();
    for command in ["replay", "shrink"] {
        let (code, out, err) = cuorder(&[command, &p]);
        assert_eq!(code, 2, "{command}: {out}{err}");
        assert!(err.contains("the profile saved in this finding is not valid (launch_queue_depth: Some(0) holds no launch"), "{command}: {err}");
        assert_eq!(out, "", "{command}");
    }
}

/// Regression (issue 33): `conform --dir --stats` resolved the manifest's profile file relative to the working
/// folder (exit 2 outside the repository root), where `conform --dir` looks in the manifest's folder and the folders
/// above it. Both resolve it alike now.
#[test]
fn conform_stats_resolved_the_profile_from_the_working_folder() {
    let root = tmp("stats-profile");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    std::fs::create_dir_all(root.join("batch")).unwrap();
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/traces/profiles/h200x2-nvlink-nccl2.28.3.ron"), root.join("profiles/h200.ron")).unwrap();
    std::fs::write(root.join("batch/MANIFEST.ron"), "Manifest(profile: \"profiles/h200.ron\")\n").unwrap();
    let batch = root.join("batch").display().to_string();
    let (code, out, err) = cuorder(&["conform", "--dir", &batch, "--stats"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("| hardware outcome | model verdict | runs |"), "{out}");
    // A profile that is nowhere is still an error, naming the folder searched.
    std::fs::write(root.join("batch/MANIFEST.ron"), "Manifest(profile: \"profiles/nope.ron\")\n").unwrap();
    let (code, _, err) = cuorder(&["conform", "--dir", &batch, "--stats"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("profile not found"), "{err}");
}

/// Regression (issue 33): Ctrl-C killed `time` and `run` with no output, though `--help` promises what was found so
/// far and exit 3 for a run. `time` reports the steps taken, `run` prints the timeline so far; both end with the
/// outcome "interrupted by Ctrl-C after N steps", exit 3.
#[cfg(unix)]
#[test]
fn ctrl_c_killed_time_and_run_without_a_report() {
    let p = gen_pipeline("ctrl-c-1f1b-1024x64.ron", &["--schedule", "1f1b", "--stages", "1024", "--microbatches", "64"]);
    // In a debug build, timing 1F1B 1024x64 takes tens of seconds, a random run of it more than a minute.
    for (command, report) in [("time", "makespan so far (interrupted by Ctrl-C)"), ("run", "outcome: interrupted by Ctrl-C after")] {
        let (code, stdout, stderr) = interrupted(&["--progress", "always", command, &p], |e| drawn(e, "steps") > 0);
        // The timeline of `run` is long: its end is enough to tell.
        let end = stdout.char_indices().rev().nth(2000).map_or(&stdout[..], |(i, _)| &stdout[i..]);
        assert_eq!(code, 3, "{command}: {end}{stderr}");
        assert!(stdout.contains("outcome: interrupted by Ctrl-C after"), "{command}: {end}");
        assert!(stdout.contains(report), "{command}: {end}");
        assert!(stderr.contains("interrupted: stopping the run"), "{command}: {stderr}");
    }
}

/// The largest count the progress bar drew on `stderr` before `/TOTAL UNIT` ("1,024/2,000 candidates": 1024).
#[cfg(unix)]
fn drawn(stderr: &str, unit: &str) -> u64 {
    let count = |before: &str| before.rsplit(' ').next()?.split_once('/')?.0.replace(',', "").parse::<u64>().ok();
    stderr.split(&format!(" {unit}")).filter_map(count).max().unwrap_or(0)
}

/// A program whose conformance search takes minutes: 14 streams, each with a kernel and an event, and every event
/// queried twice (each query has two answers), with an observation of it that hung in its last op, which no
/// execution of the model shows (so that no agreement ends the question early). Returns both paths.
#[cfg(unix)]
fn long_conformance() -> (String, String) {
    let k = 14;
    let list = |f: &dyn Fn(usize) -> String, sep: &str| (0..k).map(f).collect::<Vec<_>>().join(sep);
    let program = format!(
        "Program(\n    ranks: 1,\n    streams: [{}],\n    events: [{}],\n    buffers: [{}],\n    threads: [Thread(\"main\", [\n{}\n{q}\n{q}\n        DeviceSync,\n    ])],\n)\n",
        list(&|i| format!("Stream(\"s{i}\", NonBlocking)"), ", "),
        list(&|i| format!("\"e{i}\""), ", "),
        list(&|i| format!("Buffer(\"y{i}\", \"1 KiB\")"), ", "),
        list(&|i| format!("        Kernel(\"k{i}\", stream: \"s{i}\", writes: [\"y{i}\"]),\n        Record(\"e{i}\", stream: \"s{i}\"),"), "\n"),
        q = list(&|i| format!("        EventQuery(\"e{i}\"),"), "\n"),
    );
    let p = tmp("queries.ron");
    std::fs::write(&p, program).unwrap();
    let o = tmp("queries-observed.ron");
    std::fs::write(
        &o,
        "Observation(format_version: 1, program: \"queries\", outcome: Hung(never_finished: [], threads: [ThreadPosition(rank: 0, \
         thread: 0, at: InOp(56))]), environment: Environment(gpus: [], driver_version: None, \
         nccl_version: None, nccl_library: None, hostname: None), timeout_ms: 3000, versions: {}, reads: [], ops: [], clock_anchors: [])\n",
    )
    .unwrap();
    (p.display().to_string(), o.display().to_string())
}

/// Regression (issue 33): Ctrl-C killed `conform` with no output, one trace or a folder of them. One trace: the
/// search stops and the result is inconclusive (exit 3). `--dir`: it stops between traces (and in the search of the
/// trace in hand, which is then not listed), reports the traces checked so far, says it stopped, and leaves the gate
/// undecided (exit 3).
#[cfg(unix)]
#[test]
fn ctrl_c_killed_conform_without_a_report() {
    let (p, o) = long_conformance();
    let (code, stdout, stderr) = interrupted(&["--progress", "always", "conform", &p, &o], |e| drawn(e, "states") > 0);
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert!(stdout.starts_with("inconclusive: the search stopped"), "{stdout}");
    assert!(stdout.contains("note: interrupted by Ctrl-C after"), "{stdout}");
    assert!(stderr.contains("interrupted: stopping the search"), "{stderr}");
    // A folder with a short trace and the long one, checked in that order.
    let dir = tmp("ctrl-c-conform-dir");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("programs")).unwrap();
    std::fs::copy(&p, dir.join("programs/queries.ron")).unwrap();
    std::fs::copy(&o, dir.join("queries.ron")).unwrap();
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/nccl-1456-grouped.ron"), dir.join("programs/a-grouped.ron")).unwrap();
    let grouped = "Observation(format_version: 1, program: \"a-grouped\", outcome: Completed, environment: Environment(gpus: [], driver_version: None, \
                   nccl_version: None, nccl_library: None, hostname: None), timeout_ms: 3000, versions: {}, reads: [], ops: [], clock_anchors: [])\n";
    std::fs::write(dir.join("a-grouped.ron"), grouped).unwrap();
    std::fs::write(dir.join("MANIFEST.ron"), "Manifest(profile: \"portable\")\n").unwrap();
    let d = dir.display().to_string();
    // SIGINT goes while the long trace is checked (the other one takes a few hundred states).
    let (code, stdout, stderr) = interrupted(&["--progress", "always", "conform", "--dir", &d], |e| drawn(e, "states") > 10_000);
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert!(stdout.contains("a-grouped.ron: agrees\n"), "{stdout}");
    assert!(!stdout.contains("queries.ron"), "the trace whose search was cut short is not listed as checked: {stdout}");
    assert!(stdout.contains("interrupted by Ctrl-C: the files above were checked, the others were not\n"), "{stdout}");
    assert!(stdout.ends_with("gate not decided (interrupted by Ctrl-C)\n"), "{stdout}");
}

/// Regression (issue 33): Ctrl-C killed `shrink` with no output, losing every candidate it had checked. It now
/// writes and reports the smallest program found so far (saying it is not minimal), exit 3.
#[cfg(unix)]
#[test]
fn ctrl_c_killed_shrink_without_the_smallest_program_so_far() {
    let p = gen_pipeline("ctrl-c-race24.ron", &["--schedule", "1f1b", "--stages", "24", "--microbatches", "8", "--race", "--unroll"]);
    let saved = tmp("ctrl-c-race24-findings");
    let s = saved.display().to_string();
    let (code, out, err) = cuorder(&["explore", &p, "--executions", "2", "--first", "--save", &s]);
    assert_eq!(code, 1, "{out}{err}");
    let artifact = saved.join("finding-1-data-race.ron").display().to_string();
    let out_dir = tmp("ctrl-c-shrunk");
    std::fs::create_dir_all(&out_dir).unwrap();
    let o = out_dir.display().to_string();
    // Shrinking this pipeline takes more than a minute in a debug build; SIGINT goes once a candidate was checked.
    let (code, stdout, stderr) = interrupted(&["--progress", "always", "shrink", &artifact, "-o", &o], |e| drawn(e, "candidates") > 0);
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert!(stdout.starts_with("interrupted by Ctrl-C: the smallest program found so far from"), "{stdout}");
    assert!(stdout.contains("data race"), "{stdout}");
    let min = std::fs::read_to_string(out_dir.join("ctrl-c-race24-min.ron")).expect("the smallest program so far is written");
    assert!(min.contains("// The shrink was interrupted by Ctrl-C: the smallest program found so far, not a minimal one."), "{min}");
    assert!(out_dir.join("ctrl-c-race24-min.finding.ron").is_file());
    assert!(stderr.contains("interrupted: stopping and printing what was done so far"), "{stderr}");
}

/// Regression (issue 33): Ctrl-C killed `gen` with no output. It stops between programs, says how many of how many
/// it wrote, exit 3.
#[cfg(unix)]
#[test]
fn ctrl_c_killed_gen_without_saying_what_it_wrote() {
    let dir = tmp("ctrl-c-gen");
    let d = dir.display().to_string();
    let _ = std::fs::remove_dir_all(&dir);
    // 10,000 programs take about 10 s in a debug build; SIGINT goes once the first ones are written.
    let (code, stdout, stderr) = interrupted(&["--progress", "always", "gen", "--count", "10000", "--out", &d], |e| drawn(e, "programs") > 0);
    let files = std::fs::read_dir(&dir).map(|r| r.count()).unwrap_or(0);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 3, "{stdout}{stderr}");
    assert_eq!(stdout, format!("wrote {files} of 10000 program(s) to {d} (interrupted by Ctrl-C)\n"));
    assert!(files < 10_000, "{files}");
    assert!(stderr.contains("interrupted: stopping and printing what was done so far"), "{stderr}");
}

/// From a new user's review: `check --time-limit 2` and `explore --max-time-s 5` were refused ("unexpected
/// argument"); each command now takes the other's name for its time budget.
#[test]
fn check_and_explore_take_each_others_time_limit_flag() {
    let (code, out, err) = cuorder(&["check", "examples/nccl-1456-grouped.ron", "--time-limit", "30"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cuorder(&["explore", "examples/nccl-1456-grouped.ron", "--executions", "5", "--max-time-s", "30"]);
    assert_eq!(code, 3, "{out}{err}");
}

/// Regression (new-user trial, 2026-12-02): `--depth 0` was taken as 1 silently and `--depth 1000000` hung; the
/// depth is 1 to 10,000. `gen pipeline --stages 5000` wrote a program `check` then refused (more than MAX_RANKS
/// ranks); `gen` refuses it.
#[test]
fn pct_depth_and_pipeline_stages_out_of_range_are_refused() {
    for d in ["0", "10001"] {
        let (code, _, err) = cuorder(&["explore", "examples/nccl-1456-send-first-connected.ron", "--strategy", "pct", "--depth", d]);
        assert_eq!(code, 2, "--depth {d}: {err}");
        assert!(err.contains("10000"), "{err}");
    }
    let out = std::env::temp_dir().join(format!("cuorder-5000-{}.ron", std::process::id()));
    let (code, _, err) = cuorder(&["gen", "pipeline", "--schedule", "1f1b", "--stages", "5000", "--microbatches", "1", "-o", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("MAX_RANKS = 4096") && !out.exists(), "{err}");
}

/// Regression (new-user trial, 2026-12-02): one sampled execution was reported as "1 executions", "in all 1 sampled
/// executions" and "saved 1 finding(s)", and its steps as "explored N states" (a walk compares no states).
#[test]
fn one_sampled_execution_is_singular() {
    let dir = std::env::temp_dir().join(format!("cuorder-singular-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) =
        cuorder(&["explore", "examples/megatron-batch-p2p-race.ron", "--executions", "1", "--save", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains(": 1 execution, ") && out.contains("in the 1 sampled execution") && out.contains("saved "), "{out}");
    assert!(!out.contains("1 executions") && !out.contains("finding(s)"), "{out}");
    assert!(out.contains(" steps in 1 execution, ") && !out.contains("explored"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A program with no operations (`threads: []`, or threads with empty op lists) loads and checks clean, but says so
/// on stderr: it was accepted silently, and a new user took the clean verdict for a real one.
#[test]
fn empty_program_was_accepted_silently() {
    for text in ["Program(ranks: 1, threads: [])\n", "Program(ranks: 2, threads: [Thread(\"main\", [])])\n"] {
        let f = tmp("empty.ron");
        std::fs::write(&f, text).unwrap();
        let (code, out, err) = cuorder(&["check", f.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(err.contains("warning:") && err.contains("no operations"), "{text}: {err}");
    }
    let (_, _, err) = cuorder(&["check", "examples/nccl-1456-grouped.ron"]);
    assert!(!err.contains("no operations"), "{err}");
}

/// A collective's wait-for edge names its op once: it said "r0 n: #1 all_reduce(..): #1 all_reduce(..): r1 never
/// issues its part (C1)", the item label (which already holds a one-op launch's op) followed by the op again.
#[test]
fn collective_wait_for_edge_repeated_its_op() {
    let f = tmp("coll-hang.ron");
    std::fs::write(
        &f,
        "Program(ranks: 2, streams: [Stream(\"n\", NonBlocking)], buffers: [Buffer(\"g\", \"4 MiB\")], comms: [Comm(\"world\")], \
         threads: [Thread(\"main\", [AllReduce(buf: \"g\", stream: \"n\"), OnRanks([0], [AllReduce(buf: \"g\", stream: \"n\")]), StreamSync(\"n\")])])\n",
    )
    .unwrap();
    let (code, out, _) = cuorder(&["check", f.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let line = out.lines().find(|l| l.contains("never issues its part")).unwrap_or_else(|| panic!("{out}"));
    assert_eq!(line.matches("all_reduce(").count(), 1, "{line}");
}

/// Regression (new-user trial, 2026-12-03): `gen --seed 18446744073709551615 --count 3` printed "wrote 3 program(s)"
/// and wrote none (the seed range was cut at the largest seed; one below it wrote 2 and still said 3). Seeds that
/// run past the largest are refused (exit 2); the last seeds that fit are written, as many as said.
#[test]
fn gen_said_it_wrote_programs_past_the_largest_seed() {
    let out = tmp("gen-last-seeds");
    let _ = std::fs::remove_dir_all(&out);
    let o = out.to_str().unwrap();
    let (code, said, err) = cuorder(&["gen", "--seed", "18446744073709551615", "--count", "3", "--out", o]);
    assert_eq!(code, 2, "{said}{err}");
    assert!(err.contains("runs past the largest seed") && err.contains("at most 1 program(s) fit"), "{err}");
    let (code, said, err) = cuorder(&["gen", "--seed", "18446744073709551614", "--count", "2", "--out", o]);
    assert_eq!(code, 0, "{err}");
    assert!(said.contains("wrote 2 program(s)"), "{said}");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 2, "{said}");
}

/// Regression (new-user trial): a profile read from a file was labelled by the `name:` inside it, so `check
/// --profile my.ron` of an edited copy of portable said "profile portable", and its witness hint, `cuorder run PROGRAM
/// --witness 1` (`--profile NAME` for other names), did not reproduce the run: the hint now passes the file as given,
/// every report names it ("profile portable (from my.ron)"), and JSON keeps `profile` the name and adds `profile_file`.
#[test]
fn a_profile_file_was_labelled_and_hinted_as_the_builtin_it_copied() {
    let prog = "examples/nccl-1456-send-first-connected.ron";
    let (_, text, _) = cuorder(&["profile", "portable"]);
    let f = tmp("my portable.ron");
    std::fs::write(&f, text.replace("eager_bytes_guaranteed: Some(0)", "eager_bytes_guaranteed: Some(1)")).unwrap();
    let file = f.to_str().unwrap();
    let (code, out, err) = cuorder(&["check", prog, "--profile", file]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains(&format!("  profile portable (from {file}); explored ")), "{out}");
    // The hint passes the file back as one shell word.
    assert!(out.contains(&format!("`cuorder run PROGRAM --witness 1 --profile '{file}'` prints it")), "{out}");
    let (code, run, err) = cuorder(&["run", prog, "--witness", "1", "--profile", file]);
    assert_eq!(code, 0, "{err}");
    assert!(run.starts_with(&format!("nccl-1456-send-first-connected: one execution under profile portable (from {file}) (replay;")), "{run}");
    assert!(run.contains("outcome: deadlock"), "{run}");
    // Built-in profiles keep their hints: none for portable, the name for the others.
    let (_, out, _) = cuorder(&["check", prog]);
    assert!(out.contains("  profile portable; ") && out.contains("`cuorder run PROGRAM --witness 1` prints it"), "{out}");
    let (_, out, _) = cuorder(&["check", prog, "--profile", "eager"]);
    assert!(out.contains("  profile eager; ") && out.contains("--witness 1 --profile eager` prints it"), "{out}");
    // JSON: `profile` is still the profile's name; `profile_file` the file as given (null for a built-in).
    for cmd in ["check", "time"] {
        let (_, json, _) = cuorder(&[cmd, prog, "--profile", file, "--format", "json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!((v[cmd]["profile"].as_str(), v[cmd]["profile_file"].as_str()), (Some("portable"), Some(file)), "{json}");
        let (_, json, _) = cuorder(&[cmd, prog, "--format", "json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!((v[cmd]["profile"].as_str(), v[cmd]["profile_file"].is_null()), (Some("portable"), true), "{json}");
    }
    let (_, out, _) = cuorder(&["time", prog, "--profile", file]);
    assert!(out.contains(&format!("one timed execution under profile portable (from {file}), costs")), "{out}");
    // A saved finding keeps the file's name: replay says where its profile came from.
    let dir = tmp("profile-file-saved");
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = cuorder(&["explore", prog, "--strategy", "exhaustive", "--profile", file, "--save", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains(&format!("profile portable (from {file})")), "{out}");
    let (code, out, err) = cuorder(&["replay", dir.join("finding-1-deadlock.ron").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("under profile portable (from {file})")), "{out}");
}

/// Regression (new-user trial): `run PROGRAM --witness N --seed S` ran the witness and dropped the seed without a
/// word (which wins?), and `--max-steps` was dropped the same way (a witness replays its whole schedule). Both pairs
/// are refused as usage errors (exit 2); each flag alone still runs.
#[test]
fn run_witness_with_seed_or_max_steps_was_accepted_silently() {
    let prog = "examples/nccl-1456-send-first-connected.ron";
    for flag in [["--seed", "3"], ["--max-steps", "10"]] {
        let (code, out, err) = cuorder(&[&["run", prog, "--witness", "1"][..], &flag].concat());
        assert_eq!((code, out.as_str()), (2, ""), "{flag:?}: {err}");
        assert!(err.contains("cannot be used with") && err.contains(flag[0]) && err.contains("--witness"), "{err}");
        let (code, _, err) = cuorder(&[&["run", prog][..], &flag].concat());
        assert_eq!(code, 0, "{flag:?}: {err}");
    }
    let (code, out, err) = cuorder(&["run", prog, "--witness", "1", "--max-time-s", "60"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("outcome: deadlock"), "{out}");
}

/// Regression (new-user trial): counts of one were printed as plurals: `conform --dir` of a folder with one trace
/// said "1 files", `check` of an empty program "explored 1 states", and `shrink` of a one-rank race "2 ops on 1
/// ranks" (and "1 candidates" where one was tried).
#[test]
fn counts_of_one_were_printed_as_plurals() {
    let root = traces_folder("one");
    std::fs::remove_file(root.join("good/sendrecv_grouped_1mib.ron")).unwrap();
    let (code, out, err) = cuorder(&["conform", "--dir", root.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.ends_with("\n1 file: 1 agrees; gate passed\n"), "{out}");
    let empty = tmp("one-state.ron");
    std::fs::write(&empty, "Program(ranks: 1, threads: [])\n").unwrap();
    let (code, out, _) = cuorder(&["check", empty.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("  profile portable; explored 1 state, 1 final"), "{out}");
    let dir = tmp("one-rank");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let race = dir.join("race.ron");
    std::fs::write(
        &race,
        "Program(ranks: 1, streams: [Stream(\"a\", NonBlocking), Stream(\"b\", NonBlocking)], buffers: [Buffer(\"x\", \"1 MiB\")], \
         threads: [Thread(\"main\", [Kernel(\"k1\", stream: \"a\", writes: [\"x\"]), Kernel(\"k2\", stream: \"b\", writes: [\"x\"]), DeviceSync])])\n",
    )
    .unwrap();
    let saved = dir.join("saved");
    let (code, out, err) = cuorder(&["explore", race.to_str().unwrap(), "--strategy", "exhaustive", "--first", "--save", saved.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    let (code, out, err) = cuorder(&["shrink", saved.join("finding-1-data-race.ron").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(" to 2 ops on 1 rank (from 3 ops on 1 rank; "), "{out}");
    let min = std::fs::read_to_string(saved.join("race-min.ron")).unwrap();
    assert!(min.lines().next().unwrap().contains("(3 ops on 1 rank -> 2 ops on 1 rank, "), "{min}");
}

/// The new-user trial of issue 30: `run --witness N` replayed a hang that needs collective connections made at init
/// (N7) or NCCL 2.22-2.29.3's kernel-plan order (N14) and said nothing of the platform it took; `check` had said so
/// in the finding's `platform:` line.
#[test]
fn run_witness_did_not_say_which_platform_it_takes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let at_init = root.join("examples/cudafree-collective-connect-at-init.ron");
    let (code, out, _) = cuorder(&["run", at_init.to_str().unwrap(), "--witness", "1"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("platform: this execution has collective connections made at init"), "{out}");
    let restart = root.join("examples/group-plan-order-restart.ron");
    let (code, out, _) = cuorder(&["run", restart.to_str().unwrap(), "--witness", "1"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("platform: this execution has NCCL 2.22-2.29.3's kernel-plan order"), "{out}");
    // A profile that fixes the choice leaves nothing to say.
    let (_, out, _) = cuorder(&["run", at_init.to_str().unwrap(), "--profile", "eager"]);
    assert!(!out.contains("platform:"), "{out}");
}
