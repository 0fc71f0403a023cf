//! `--format json` against its documented schema (`docs/json.md`): every field name the CLI prints is documented,
//! every documented field is printed by some run, the output reads back into the typed schema (`src/json.rs`, which
//! refuses unknown fields), ops carry file/line/column, and findings carry rule ids. Every command that takes
//! `--format json` (`check`, `explore` with each strategy, `time`) is covered, load errors included.

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
    let saved = tmp.join("saved");
    let _ = std::fs::remove_dir_all(&saved);
    let connected = "examples/nccl-1456-send-first-connected.ron";
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
        (vec!["explore", connected, "--strategy", "exhaustive"], 1),
        (vec!["explore", connected, "--strategy", "random", "--executions", "50", "--jobs", "1", "--save", saved.to_str().unwrap()], 1),
        (vec!["explore", connected, "--strategy", "pct", "--executions", "50", "--jobs", "2"], 1),
        (vec!["explore", connected, "--strategy", "bounded", "--bound", "1"], 1),
        (vec!["explore", connected, "--strategy", "dpor"], 1),
        (vec!["explore", "examples/nccl-1456-grouped.ron", "--strategy", "bounded"], 0),
        (vec!["explore", "examples/nccl-1456-grouped.ron", "--strategy", "random", "--executions", "10"], 3),
        (vec!["explore", "examples/nccl-1456-send-first.ron", "--strategy", "pct", "--executions", "10"], 1),
        (vec!["explore", "examples/torch/megatron-batch-p2p.ron", "--torch-version", "before82450", "--executions", "20"], 1),
        (vec!["explore", bad.to_str().unwrap(), "--strategy", "dpor"], 2),
    ];
    let doc = documented();
    let mut printed = BTreeSet::new();
    for (mut args, want) in runs {
        args.extend(["--format", "json"]);
        let (code, v, text) = json(&args);
        assert_eq!(code, want, "{args:?}: {text}");
        assert_eq!(v["schema_version"], 1, "{text}");
        assert_eq!(v["exit_code"], want, "{text}");
        assert_eq!(v["command"], args[0], "{text}");
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

/// Regression: `explore --format json` printed a raw serde dump of its internal report instead of docs/json.md's
/// document: no `schema_version`, `command` or `exit_code`, and each finding as `"finding": {"problem": {"Deadlock":
/// {"cycle": [{"from": {"Item": {"thread": 0, "op": 6, "sub": 0}}` with internal thread ids and the witness steps;
/// a file that did not load printed text on stderr and nothing on stdout. Every strategy now prints `check`'s
/// document (`command: "explore"`, findings named as `check` names them) with an `explore` object beside it, the
/// same bytes for the same input and seed (whatever `--jobs`), and a bad file is the `errors` form, exit 2.
#[test]
fn explore_json_followed_docs_json_md_not_an_internal_dump() {
    let p = "examples/nccl-1456-send-first-connected.ron";
    let (_, check, _) = json(&["check", p, "--format", "json"]);
    let named = |f: &serde_json::Value| {
        let mut ops: Vec<String> = f["ops"].as_array().unwrap().iter().map(|o| o.to_string()).collect();
        ops.sort();
        (f["kind"].clone(), f["rules"].clone(), ops)
    };
    let want = named(&check["check"]["findings"][0]);
    let strategies: [(&str, &[&str]); 5] = [
        ("exhaustive", &[]),
        ("random", &["--executions", "50", "--seed", "7"]),
        ("pct", &["--executions", "50", "--seed", "7"]),
        ("bounded", &["--bound", "1"]),
        ("dpor", &[]),
    ];
    for (strategy, extra) in strategies {
        let mut args = vec!["explore", p, "--strategy", strategy, "--format", "json"];
        args.extend(extra);
        let (code, v, text) = json(&args);
        assert_eq!(code, 1, "{args:?}: {text}");
        assert_eq!(v["schema_version"], 1, "{text}");
        assert_eq!(v["command"], "explore", "{text}");
        assert_eq!(v["exit_code"], 1, "{text}");
        assert!(v["errors"].is_null(), "{text}");
        for internal in ["\"finding\"", "\"problem\"", "\"Deadlock\"", "\"Item\"", "\"sub\"", "\"cycle\"", "\"witness\"", "\"starved_states\""] {
            assert!(!text.contains(internal), "{strategy}: internal field {internal} in {text}");
        }
        let typed: cuorder::json::Output = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{strategy}: {e}: {text}"));
        let (c, e) = (typed.check.expect("a check object"), typed.explore.expect("an explore object"));
        assert_eq!(e.strategy, strategy, "{text}");
        assert_eq!(c.file, p, "{text}");
        // The deadlock `check` reports, named the same way (rank, thread name, op number, file, line, column).
        assert_eq!(c.findings.len(), 1, "{text}");
        assert_eq!(named(&v["check"]["findings"][0]), want, "{strategy}: not the finding `check` names: {text}");
        assert_eq!(e.findings.iter().map(|f| f.number).collect::<Vec<_>>(), vec![1], "{text}");
        let sampled = matches!(strategy, "random" | "pct");
        assert_eq!(e.seed, sampled.then_some(7), "{text}");
        assert_eq!(e.findings[0].seen_in.is_some() && e.findings[0].first_seed.is_some(), sampled, "{text}");
        assert_eq!(e.findings[0].first_bound, (strategy == "bounded").then_some(1), "{text}");
        assert_eq!(e.bound, (strategy == "bounded").then_some(1), "{text}");
        assert_eq!(e.depth, (strategy == "pct").then_some(3), "{text}");
        assert_eq!(e.executions.is_some(), sampled || strategy == "dpor", "{text}");
        // Sampled and bounded searches prove nothing beyond what they ran.
        assert_eq!(c.inconclusive, strategy != "exhaustive" && strategy != "dpor", "{text}");
        // Same input and seed, same bytes; sampling: whatever --jobs.
        let (_, _, again) = json(&args);
        assert_eq!(text, again, "{args:?}: two runs differ");
        if sampled {
            for jobs in ["1", "2"] {
                let mut with = args.clone();
                with.extend(["--jobs", jobs]);
                assert_eq!(json(&with).2, text, "{with:?}: --jobs changed the output");
            }
        }
    }
    // A file that does not load: the `errors` form, exit 2, one JSON document and nothing else on stdout.
    let (code, v, text) = json(&["explore", "examples/no-such-program.ron", "--format", "json"]);
    assert_eq!(code, 2, "{text}");
    let typed: cuorder::json::Output = serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!((typed.command.as_str(), typed.exit_code, typed.check.is_none(), typed.explore.is_none()), ("explore", 2, true, true), "{text}");
    let errors = typed.errors.expect("errors");
    assert_eq!(errors.len(), 1, "{text}");
    assert_eq!(errors[0].file, "examples/no-such-program.ron", "{text}");
    // A --save folder that cannot be made: the same form (it printed text on stderr and nothing on stdout).
    let (code, v, text) = json(&["explore", p, "--executions", "5", "--save", "Cargo.toml/saved", "--format", "json"]);
    assert_eq!(code, 2, "{text}");
    assert_eq!((v["command"].as_str(), v["errors"][0]["file"].as_str()), (Some("explore"), Some("Cargo.toml/saved")), "{text}");
}
