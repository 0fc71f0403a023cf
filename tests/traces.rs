//! Every recorded hardware trace is re-checked against the current model (no GPU needed): a model change that
//! contradicts real hardware fails here. Each folder of traces/hw/ with a MANIFEST.ron holds observations `X.ron`
//! of the programs `programs/X.ron`, the profile to check them under, and the disagreements that are explained
//! (each with its reason); every other trace must agree.

use std::path::Path;

use cuorder_model::semantics::Semantics;
use cuorder_sim::conform::conform;
use cuorder_sim::explore::Limits;

#[test]
fn every_recorded_hardware_trace_agrees_with_the_model_or_is_an_explained_disagreement() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(!cuorder::traces::manifests(&root.join("traces/hw")).is_empty(), "no traces/hw/**/MANIFEST.ron");
    let rep = cuorder::traces::check_dir(&root.join("traces/hw"), &Limits::default());
    let checked = rep.entries.iter().filter(|e| e.conformance.is_some()).count();
    eprintln!("{checked} hardware traces re-checked");
    assert!(checked > 0);
    let failures: Vec<String> = rep
        .entries
        .iter()
        .filter(|e| !e.status.passes())
        .map(|e| format!("{}: {}\n{}", e.file.display(), e.status.word(), e.status.details().unwrap_or("")))
        .collect();
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), rep.summary());
}

/// The checks can fail: a read that saw initial contents after an event wait ordered it after the writer, and a
/// hang of a program that always completes, are disagreements.
#[test]
fn conformance_rejects_what_the_model_forbids() {
    use cuorder_model::observation::{Outcome, Seen, Version};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (program, _) = cuorder::load_program(&root.join("traces/hw/smoke/programs/kernel_write_read.ron"), false).unwrap();
    let obs = cuorder::load_observation(&root.join("traces/hw/smoke/kernel_write_read.ron")).unwrap();
    let profile = cuorder_model::profile::Profile::portable();
    let sem = Semantics::new(&program, &profile);
    assert!(conform(&sem, &obs, &Limits::default()).agrees());

    // The first read is ordered after op 0's write by an event wait: it cannot see the initial contents.
    let mut bad = obs.clone();
    let ordered = bad.reads.iter_mut().find(|r| matches!(r.seen, Seen::Uniform(Version::Op(_)))).unwrap();
    ordered.seen = Seen::Uniform(Version::Initial);
    let c = conform(&sem, &bad, &Limits::default());
    assert!(!c.agrees(), "{}", c.to_text());
    assert!(c.to_text().contains("saw Uniform(Initial)"), "{}", c.to_text());

    let mut hung = obs.clone();
    hung.outcome = Outcome::Hung { never_finished: vec![], threads: vec![] };
    let c = conform(&sem, &hung, &Limits::default());
    assert!(!c.agrees());
    assert!(c.to_text().contains("soundness: hang"), "{}", c.to_text());
}

/// A folder with a manifest and one packed file made of the first three runs of the recorded cover batch, and
/// `extra` lines after them; plus what `check_dir` says of it. The folder is removed afterwards.
fn packed_folder(name: &str, meta_generator: Option<&str>, extra: &[String]) -> cuorder::traces::DirReport {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let recorded = std::fs::read_to_string(root.join("traces/hw/cover-2026-12-01/cover.pack")).unwrap();
    let mut lines: Vec<String> = recorded.lines().take(5).map(String::from).collect();
    if let Some(g) = meta_generator {
        lines[1] = format!("meta generator {g}");
    }
    lines.extend(recorded.lines().filter(|l| l.starts_with("T\t")).take(3).map(String::from));
    lines.extend(extra.iter().cloned());
    let dir = std::env::temp_dir().join(format!("cuorder-packed-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("traces")).unwrap();
    std::fs::write(dir.join("traces/MANIFEST.ron"), "Manifest(profile: \"portable\", expect_disagree: {})").unwrap();
    std::fs::write(dir.join("traces/cover.pack"), lines.join("\n")).unwrap();
    let rep = cuorder::traces::check_dir(&dir, &Limits::default());
    let _ = std::fs::remove_dir_all(&dir);
    rep
}

/// The recorded run `cover-N`'s line.
fn recorded_run(n: usize) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let recorded = std::fs::read_to_string(root.join("traces/hw/cover-2026-12-01/cover.pack")).unwrap();
    recorded.lines().filter(|l| l.starts_with("T\t")).nth(n).unwrap().to_string()
}

fn statuses(rep: &cuorder::traces::DirReport) -> Vec<String> {
    rep.entries.iter().map(|e| format!("{}: {}", e.file.display(), e.status.word())).collect()
}

/// Issue 33: a packed run whose reads name a rank its program lacks was never validated, and `conform --dir`
/// panicked on it (exit 101, no output: every good result of the tree lost). It is now that run's error, and the
/// other runs are checked.
#[test]
fn a_packed_run_naming_a_rank_its_program_lacks_panicked_conform_dir() {
    let mut bad: Vec<String> = recorded_run(3).split('\t').map(String::from).collect();
    bad[1] = "cover-3".into();
    bad[4] = "Hung(never_finished: [], threads: [(rank: 9, thread: 0, at: InOp(3))])".into();
    let rep = packed_folder("rank", None, &[bad.join("\t")]);
    let s = statuses(&rep);
    assert_eq!(s.iter().filter(|l| l.ends_with(": agrees")).count(), 3, "{s:?}");
    let errors: Vec<_> = rep.entries.iter().filter(|e| e.status.word() == "ERROR").collect();
    assert_eq!(errors.len(), 1, "{s:?}");
    let why = errors[0].status.details().unwrap();
    assert!(errors[0].file.to_str().unwrap().ends_with("cover.pack#cover-3") && why.contains("line 9") && why.contains("rank 9"), "{why}");
}

/// Issue 33: one truncated `.pack` (a run line cut short, as by a killed writer) lost the good runs of its folder.
#[test]
fn one_truncated_pack_dropped_the_good_runs_of_its_folder() {
    let cut: String = recorded_run(3).chars().take(30).collect();
    let rep = packed_folder("truncated", None, &[cut]);
    let s = statuses(&rep);
    assert_eq!(s.iter().filter(|l| l.ends_with(": agrees")).count(), 3, "{s:?}");
    let errors: Vec<_> = rep.entries.iter().filter(|e| e.status.word() == "ERROR").collect();
    assert_eq!(errors.len(), 1, "{s:?}");
    assert!(errors[0].status.details().unwrap().contains("line 9: a run line has 8 tab-separated fields"), "{s:?}");
    assert!(!rep.passed());
}

/// Issue 33: a `meta generator` line is input: `ranks=4294967295` made the regeneration ask for 412 GB and abort.
/// It is bounded like a program and reported with its line, for each run that needs it.
#[test]
fn a_pack_generator_line_with_4294967295_ranks_aborted() {
    for g in ["cover 1 ranks=4294967295 max_threads=3 max_ops=6 pool=true", "cover 1 ranks=4096 max_threads=3 max_ops=100000 pool=true"] {
        let rep = packed_folder("generator", Some(g), &[]);
        let s = statuses(&rep);
        assert_eq!(rep.entries.len(), 3, "{s:?}");
        for e in &rep.entries {
            let why = e.status.details().unwrap_or("");
            assert!(e.status.word() == "ERROR" && why.contains("line 2: "), "{g}: {s:?} {why}");
        }
    }
}

/// Issue 33: a FIFO named like a trace's program under `programs/` hung `conform --dir` (it waited for a writer).
#[cfg(unix)]
#[test]
fn a_fifo_in_programs_hung_conform_dir() {
    let dir = std::env::temp_dir().join(format!("cuorder-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("t/programs")).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::write(dir.join("t/MANIFEST.ron"), "Manifest(profile: \"portable\", expect_disagree: {})").unwrap();
    std::fs::copy(root.join("traces/hw/smoke/kernel_write_read.ron"), dir.join("t/kernel_write_read.ron")).unwrap();
    let fifo = dir.join("t/programs/kernel_write_read.ron");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped: mkfifo is not available");
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dir.clone();
    std::thread::spawn(move || tx.send(cuorder::traces::check_dir(&d, &Limits::default())).unwrap());
    let rep = rx.recv_timeout(std::time::Duration::from_secs(30)).expect("conform --dir hung on a FIFO");
    let _ = std::fs::remove_dir_all(&dir);
    let s = statuses(&rep);
    assert_eq!(rep.entries.len(), 1, "{s:?}");
    assert!(rep.entries[0].status.details().unwrap().contains("not a regular file"), "{s:?}");
}
