//! The differential property of issue 30, in CI: on seeded generated programs over every operation family,
//! `check`'s search (reduction, forgetting, withholding, eager dominance), the naive reference explorer
//! (`sim::reference`) and DPOR report the same findings with the same frequencies, and random walks find nothing
//! the reference does not. The long campaign (a million programs) is a command, not a test:
//! `cargo run --release --bin cuorder-differential -- --seeds 0..1000000`.

use cuorder_model::profile::Profile;
use cuorder_model::semantics::Semantics;
use cuorder_sim::differential::{campaign, family_of, program_text, Budgets, Family};

/// Seeds of the short campaign: 12 programs per family by default; `CUORDER_DIFF_SEEDS=N` runs 0..N.
fn seeds() -> std::ops::Range<u64> {
    0..std::env::var("CUORDER_DIFF_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(144)
}

#[test]
fn check_the_reference_and_dpor_agree_on_generated_programs() {
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let c = campaign(seeds(), jobs, &Budgets::default(), &|_| {});
    let total = c.total();
    eprintln!("{}", c.render());
    assert_eq!((total.disagreements, total.rejected), (0, 0), "{}", c.render());
    // The campaign must keep comparing something in every family, including programs with findings (a generator
    // whose programs all grow past the reference's budget, or all load wrong, would test nothing).
    for (family, t) in &c.families {
        assert!(t.compared >= t.programs, "{}: only {} of {} (program, profile) pairs compared\n{}", family.name(), t.compared, 2 * t.programs, c.render());
        assert!(t.with_findings > 0 || *family == Family::Streams, "{}: no finding in any program\n{}", family.name(), c.render());
    }
    assert!(total.dpor * 2 >= total.compared, "DPOR finished on only {} of {} pairs\n{}", total.dpor, total.compared, c.render());
}

/// The same seed is the same program text on every run (the campaign names programs by seed), and seeds cycle
/// through the families.
#[test]
fn generated_programs_are_named_by_their_seed() {
    for seed in 0..48 {
        assert_eq!(program_text(seed), program_text(seed));
        assert_eq!(family_of(seed), Family::ALL[(seed % 12) as usize]);
    }
    assert_ne!(program_text(1), program_text(13));
}

/// The reference explorer gives the litmus verdicts of SEMANTICS.md section 6 and the send-first deadlock, so that
/// agreeing with it means something.
#[test]
fn the_reference_explorer_gives_the_litmus_verdicts() {
    let head = r#"Program(ranks: 1, streams: [Stream("sA", NonBlocking), Stream("sB", NonBlocking)], events: ["e"], buffers: [Buffer("a", "4 KiB")], threads: [Thread("main", ["#;
    let cases = [
        ("L1", r#"Kernel("w", stream: "sA", writes: ["a"]), Kernel("r", stream: "sA", reads: ["a"])"#, vec![]),
        ("L2", r#"Kernel("w", stream: "sA", writes: ["a"]), Kernel("r", stream: "sB", reads: ["a"])"#, vec!["data race always"]),
        ("L3", r#"Kernel("w", stream: "sA", writes: ["a"]), Record("e", stream: "sA"), Wait("e", stream: "sB"), Kernel("r", stream: "sB", reads: ["a"])"#, vec![]),
        ("L4", r#"Record("e", stream: "sA"), Kernel("w", stream: "sA", writes: ["a"]), Wait("e", stream: "sB"), Kernel("r", stream: "sB", reads: ["a"])"#, vec!["data race always"]),
        ("L5", r#"Wait("e", stream: "sB"), Kernel("w", stream: "sA", writes: ["a"]), Record("e", stream: "sA"), Kernel("r", stream: "sB", reads: ["a"])"#, vec!["data race always"]),
    ];
    for (name, ops, want) in cases {
        let p = cuorder_model::format::load(name, &format!("{head}{ops}])])")).unwrap();
        let prof = Profile::portable();
        let r = cuorder_sim::reference::explore_reference(&Semantics::new(&p, &prof), 10_000).expect("small");
        let got: Vec<String> = r.findings.iter().map(|f| format!("{} {}", f.problem.kind_name(), if f.frequency == cuorder_model::verdict::Frequency::Always { "always" } else { "sometimes" })).collect();
        assert_eq!(got, want, "{name}");
    }
    let send_first = r#"Program(ranks: 2, streams: [Stream("s", NonBlocking)], buffers: [Buffer("x", "1 GiB"), Buffer("y", "1 GiB")], comms: [Comm("world")],
        threads: [Thread("main", [Group([Send(to: Next, buf: "x", stream: "s"), Recv(from: Prev, buf: "y", stream: "s")]), StreamSync("s"),
            Send(to: Next, buf: "x", stream: "s"), Recv(from: Prev, buf: "y", stream: "s"), StreamSync("s")])])"#;
    let p = cuorder_model::format::load("send-first", send_first).unwrap();
    let prof = Profile::portable();
    let r = cuorder_sim::reference::explore_reference(&Semantics::new(&p, &prof), 100_000).expect("small");
    assert!(r.findings.iter().any(|f| f.problem.kind_name() == "deadlock"), "{:?}", r.findings);
    assert!(r.completed_states > 0, "an eager send may also complete the exchange (N2)");
}

/// The new-user trial of issue 30: a seed range ending at u64::MAX spun forever with two jobs (the seed counter
/// wrapped to 0), `--jobs 0` and `--reference-states 0` were accepted (a campaign that compares nothing exited 0),
/// and `--seeds` beside `--show` was ignored.
#[test]
fn the_campaign_command_refused_nothing_and_wrapped_around_u64_max() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cuorder-differential")).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (code, out, _) = run(&["--seeds", "18446744073709551614..18446744073709551615", "--jobs", "2"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("total                  1"), "{out}");
    for bad in [&["--jobs", "0"][..], &["--reference-states", "0"], &["--show", "3", "--seeds", "0..4"], &["--seeds", "5..5"]] {
        let (code, _, err) = run(bad);
        assert_eq!(code, Some(2), "{bad:?}: {err}");
    }
    let (code, _, err) = run(&["--seeds", "0..2", "--reference-states", "1"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no (program, profile) pair was compared"), "{err}");
    let (code, out, _) = run(&["--show", "7"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("Program(") && out.contains("generator version"), "{out}");
}
