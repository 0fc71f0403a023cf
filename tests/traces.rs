//! Every recorded hardware trace is re-checked against the current model (no GPU needed): a model change that
//! contradicts real hardware fails here. Each folder of traces/hw/ with a MANIFEST.ron holds observations `X.ron`
//! of the programs `programs/X.ron`, the profile to check them under, and the disagreements that are explained
//! (each with its reason); every other trace must agree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cuorder_model::semantics::Semantics;
use cuorder_sim::conform::conform;
use cuorder_sim::explore::Limits;

#[derive(serde::Deserialize)]
struct Manifest {
    /// A built-in profile name, or a profile file relative to the repository root.
    profile: String,
    /// Trace stem -> why the model and this hardware run disagree.
    #[serde(default)]
    expect_disagree: BTreeMap<String, String>,
}

fn manifests(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = rd.map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            manifests(&p, out);
        } else if p.file_name().is_some_and(|n| n == "MANIFEST.ron") {
            out.push(p);
        }
    }
}

#[test]
fn every_recorded_hardware_trace_agrees_with_the_model_or_is_an_explained_disagreement() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = vec![];
    manifests(&root.join("traces/hw"), &mut found);
    assert!(!found.is_empty(), "no traces/hw/**/MANIFEST.ron");
    let mut checked = 0;
    let mut failures = vec![];
    for m in found {
        let dir = m.parent().unwrap();
        let manifest: Manifest = ron::from_str(&std::fs::read_to_string(&m).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", m.display()));
        let profile = cuorder::load_profile(&manifest.profile)
            .or_else(|_| cuorder::load_profile(root.join(&manifest.profile).to_str().unwrap()))
            .unwrap_or_else(|e| panic!("{}: {}", m.display(), e.rendered));
        let mut traces: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "ron") && !p.ends_with("MANIFEST.ron"))
            .collect();
        traces.sort();
        for t in traces {
            let stem = t.file_stem().unwrap().to_str().unwrap().to_string();
            let prog_path = dir.join("programs").join(format!("{stem}.ron"));
            let (program, _) = cuorder::load_program(&prog_path, false)
                .unwrap_or_else(|e| panic!("{}: {}", prog_path.display(), e.rendered));
            let obs = cuorder::load_observation(&t).unwrap_or_else(|e| panic!("{}", e.rendered));
            let sem = Semantics::new(&program, &profile);
            let c = conform(&sem, &obs, &Limits::default());
            checked += 1;
            match (c.agrees(), manifest.expect_disagree.get(&stem)) {
                (true, None) | (false, Some(_)) => {}
                (true, Some(why)) => failures.push(format!("{}: now agrees, but the manifest explains a disagreement ({why}): update it", t.display())),
                (false, None) => failures.push(format!("{}:\n{}", t.display(), c.to_text())),
            }
        }
        for stem in manifest.expect_disagree.keys() {
            assert!(dir.join(format!("{stem}.ron")).exists(), "{}: no trace {stem}.ron", m.display());
        }
    }
    eprintln!("{checked} hardware traces re-checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
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
