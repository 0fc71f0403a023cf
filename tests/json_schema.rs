//! `--format json` against its documented schema (`docs/json.md`): every field name the CLI prints is documented,
//! every documented field is printed by some run, the output reads back into the typed schema (`src/json.rs`, which
//! refuses unknown fields), ops carry file/line/column, and findings carry rule ids.

use std::collections::BTreeSet;
use std::process::Command;

fn json(args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cuorder")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (out.status.code().unwrap_or(-1), v, text)
}

fn keys(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                out.insert(k.clone());
                keys(x, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| keys(x, out)),
        _ => {}
    }
}

/// The field names the tables of docs/json.md list (first column).
fn documented() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/json.md")).unwrap();
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(String::from)
        .collect()
}

#[test]
fn json_output_matches_the_documented_schema() {
    let tmp = std::env::temp_dir().join(format!("cuorder-json-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let bad = tmp.join("bad.ron");
    std::fs::write(&bad, "Program(ranks: 1, threads: [Thread(\"main\", [Kernal(\"k\")])])\n").unwrap();
    let runs: Vec<(Vec<&str>, i32)> = vec![
        (vec!["check", "examples/nccl-1456-send-first-connected.ron"], 1),
        (vec!["check", "examples/nccl-1456-send-first.ron"], 1),
        (vec!["check", "examples/megatron-batch-p2p-race.ron"], 1),
        (vec!["check", "examples/nccl-1456-grouped.ron"], 0),
        (vec!["check", "examples/nccl-1456-grouped.ron", "--max-states", "2"], 3),
        (vec!["check", bad.to_str().unwrap()], 2),
        (vec!["time", "examples/megatron-batch-p2p-race.ron"], 1),
        (vec!["time", "examples/nccl-1456-grouped.ron"], 0),
        (vec!["time", "examples/nccl-1456-send-first.ron"], 1),
    ];
    let doc = documented();
    let mut printed = BTreeSet::new();
    for (mut args, want) in runs {
        args.extend(["--format", "json"]);
        let (code, v, text) = json(&args);
        assert_eq!(code, want, "{args:?}: {text}");
        assert_eq!(v["schema_version"], 1, "{text}");
        assert_eq!(v["exit_code"], want, "{text}");
        let typed: cuorder::json::Output = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {text}"));
        if let Some(c) = &typed.check {
            for f in &c.findings {
                assert!(!f.ops.is_empty(), "a finding names no op: {text}");
                for op in &f.ops {
                    assert!(op.line.is_some() && op.column.is_some(), "op without a place: {text}");
                }
                if f.kind != "data race" {
                    assert!(!f.rules.is_empty(), "no rule id: {text}");
                }
            }
        }
        let mut k = BTreeSet::new();
        keys(&v, &mut k);
        let undocumented: Vec<&String> = k.iter().filter(|x| !doc.contains(*x)).collect();
        assert!(undocumented.is_empty(), "fields printed but not in docs/json.md: {undocumented:?}");
        printed.extend(k);
    }
    let never: Vec<&String> = doc.iter().filter(|x| !printed.contains(*x)).collect();
    assert!(never.is_empty(), "documented fields no run printed: {never:?}");
}

#[test]
fn json_has_no_internal_indices_or_clocks() {
    let (_, _, text) = json(&["check", "examples/megatron-batch-p2p-race.ron", "--format", "json"]);
    for internal in ["\"clock\"", "\"witness\"", "\"thread_of\"", "\"item\"", "\"sub\"", "\"start\"", "\"loc\""] {
        assert!(!text.contains(internal), "{internal} in {text}");
    }
}
