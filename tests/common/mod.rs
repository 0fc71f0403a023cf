//! The one data-driven helper of the corpus and rule tests: load a program from text, run `check` under a
//! profile, and return the verdict both as data and as the rendered text that snapshots compare.

#![allow(dead_code)]

use cuorder::report::{check, Report};
use cuorder_model::profile::Profile;
use cuorder_sim::explore::Limits;

/// Checks a program given as RON text under a built-in profile. Panics with the rendered diagnostics when the
/// program does not load (a test program must be valid).
pub fn check_text(name: &str, text: &str, profile: &str) -> Report {
    let program = match cuorder_model::format::load(name, text) {
        Ok(p) => p,
        Err(d) => panic!("{name} does not load:\n{}", cuorder::diagnostics::render(name, text, &d, false)),
    };
    check(&program, &Profile::builtin(profile).expect("built-in profile"), &Limits::default())
}

/// The kinds of the findings, with their frequency: e.g. ["deadlock always", "data race sometimes"].
pub fn kinds(r: &Report) -> Vec<String> {
    r.findings.iter().map(|f| format!("{} {}", f.kind, f.frequency)).collect()
}

/// Checks a file of the repository (path relative to the workspace root).
pub fn check_file(rel: &str, profile: &str) -> (Report, String) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let name = path.file_stem().unwrap().to_str().unwrap().to_string();
    (check_text(&name, &text, profile), text)
}

/// The report text without the exploration statistics line (state counts change with explorer optimizations,
/// which must not churn verdict snapshots).
pub fn without_stats(text: &str) -> String {
    text.lines().filter(|l| !l.trim_start().starts_with("profile ")).collect::<Vec<_>>().join("\n") + "\n"
}

/// Every program that loads in the given folders (relative to the crate root), sorted by path: (path, program).
pub fn programs_in(dirs: &[&str]) -> Vec<(String, cuorder_model::program::Program)> {
    let mut out = vec![];
    for dir in dirs {
        let mut files: Vec<_> = std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "ron"))
            .collect();
        files.sort();
        for f in files {
            if let Ok((p, _)) = cuorder::load_program(&f, false) {
                out.push((f.display().to_string(), p));
            }
        }
    }
    out
}

/// A race only an eager send allows (N2), in a program whose rank 1 runs no thread of its own: one thread drives
/// both GPUs. k1 writes y (peer access) before the recv on GPU 1; k0 writes y after the send on GPU 0. A rendezvous
/// orders the recv's start (and what precedes it on its stream) before the send's end; only an eager send leaves k0
/// unordered with k1.
pub const EAGER_ONLY_RACE: &str = r#"Program(ranks: 2, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB"), Buffer("y", "1 MiB")],
        comms: [Comm("world")],
        threads: [Thread("main", ranks: [0], ops: [
            Kernel("k1", stream: "s0@1", writes: ["y"]),
            Group([Send(to: Rank(1), buf: "x", stream: "s0"), Recv(from: Rank(0), buf: "x@1", stream: "s0@1")]),
            Kernel("k0", stream: "s0", writes: ["y"]),
            StreamSync("s0"), StreamSync("s0@1"),
        ])])"#;
