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
