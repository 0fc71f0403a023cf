//! `--format json`: the versioned, documented output for scripts (`docs/json.md`). Every op is named the way the
//! program wrote it (rank, thread name, op number) with its file, line and column; every finding cites rule ids; no
//! internal indices, vector clocks or witness steps appear. Load errors have the same envelope.

use serde::{Deserialize, Serialize};

use cuorder_model::semantics::{Node, Semantics};
use cuorder_model::semantics::OpLoc;
use cuorder_model::verdict::Problem;

use crate::report::Report;
use crate::LoadIssue;

/// The version of the schema in `docs/json.md`; changes to the meaning or the removal of a field bump it.
pub const SCHEMA_VERSION: u32 = 1;

/// The one JSON document a command prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Output {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `check` or `conform`.
    pub command: String,
    /// The process exit code that goes with this output (0, 1, 2 or 3; see `--help`).
    pub exit_code: u8,
    /// Present when the command ran.
    pub check: Option<Check>,
    /// Present when an input could not be loaded (exit code 2).
    pub errors: Option<Vec<ErrorOut>>,
    /// `time` only: the timed execution (absent from other commands' output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<crate::timing::TimeOut>,
}

/// A load error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorOut {
    pub file: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub message: String,
    pub help: Option<String>,
}

/// The result of `check`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    pub program: String,
    /// The program file as given on the command line.
    pub file: String,
    pub profile: String,
    /// `ok`, `deadlock`, `data race`, `undefined` or `inconclusive`.
    pub verdict: String,
    /// `true` when a budget (states, memory, time) stopped the search: the verdict covers only what was explored.
    pub inconclusive: bool,
    /// Why the search stopped early, when it did.
    pub limit_hit: Option<String>,
    pub states: u64,
    pub final_states: u64,
    pub completed_final_states: u64,
    pub findings: Vec<FindingOut>,
}

/// One problem found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FindingOut {
    /// 1-based, as `cuorder run --witness N` takes it.
    pub number: u32,
    /// `deadlock`, `data race` or `undefined`.
    pub kind: String,
    /// `always` (in every execution) or `sometimes`.
    pub frequency: String,
    /// Rule ids (`docs/semantics.md`, `cuorder explain RULE`) behind the finding, sorted, without duplicates.
    pub rules: Vec<String>,
    /// The explanation as the text output prints it.
    pub text: String,
    /// Every op the finding names, in the order it names them, without duplicates.
    pub ops: Vec<OpOut>,
    /// Number of steps of the witness schedule.
    pub witness_steps: u64,
}

/// An op as the program wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpOut {
    pub rank: u32,
    /// The host thread's name.
    pub thread: String,
    /// 0-based position of the op in the thread after expansion (the `#N` of the text output).
    pub op: u32,
    /// e.g. `send(to r1, x, 2 GiB, s0, world)`.
    pub label: String,
    pub file: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

fn op_out(sem: &Semantics, file: &str, loc: OpLoc) -> Option<OpOut> {
    let (r, t) = *sem.thread_of.get(loc.thread as usize)?;
    let thread = sem.program.ranks.get(r as usize)?.threads.get(t as usize)?;
    let op = thread.ops.get(loc.op as usize)?;
    Some(OpOut {
        rank: r,
        thread: thread.name.clone(),
        op: loc.op,
        label: sem.program.op_label(r, &op.kind),
        file: file.to_string(),
        line: op.origin.line,
        column: op.origin.column,
    })
}

/// The JSON of a `check` report of the program read from `file`.
pub fn check(sem: &Semantics, rep: &Report, file: &str) -> Output {
    let findings = rep
        .findings
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut rules: Vec<String> = vec![];
            let mut locs: Vec<OpLoc> = vec![];
            match &f.finding.problem {
                Problem::Deadlock(d) => {
                    let end = cuorder_sim::run::replay_state(sem, &f.finding.witness).ok();
                    for e in &d.cycle {
                        rules.push(e.reason.rule().id().to_string());
                        for n in [e.from, e.to] {
                            // A rank that never does it stands where its first thread is, if it runs one.
                            let t = match n {
                                Node::Item(k) => {
                                    locs.push(k.loc());
                                    continue;
                                }
                                Node::Thread(t) => t,
                                Node::Never(r) => match sem.rank_threads(r).next() {
                                    Some(t) => t,
                                    None => continue,
                                },
                            };
                            if let Some(th) = end.as_ref().and_then(|st| st.host.threads.get(t as usize)) {
                                locs.push(OpLoc { thread: t, op: th.pc });
                            }
                        }
                    }
                }
                Problem::DataRace(r) => {
                    locs.push(r.first.who.loc());
                    locs.push(r.second.who.loc());
                }
                Problem::Timeout(to) => {
                    // The watchdog (N9) aborts the communicators (N13), as the finding's text cites.
                    rules.push(cuorder_model::rule::Rule::N9.id().to_string());
                    rules.push(cuorder_model::rule::Rule::N13.id().to_string());
                    for e in &to.stuck.cycle {
                        rules.push(e.reason.rule().id().to_string());
                        if let Node::Item(k) = e.from {
                            locs.push(k.loc());
                        }
                        if let Node::Item(k) = e.to {
                            locs.push(k.loc());
                        }
                    }
                    locs.extend(to.at.iter().map(|(t, pc)| OpLoc { thread: *t, op: *pc }).filter(|l| (l.op as usize) < sem.ops_len(l.thread)));
                }
                Problem::Undefined(u) => {
                    rules.push(u.rule.id().to_string());
                    locs.extend(u.at.iter().copied());
                }
                Problem::StaleRead(s) => {
                    rules.push(cuorder_model::rule::Rule::V1.id().to_string());
                    locs.push(s.check);
                    locs.push(s.writer);
                }
            }
            rules.sort();
            rules.dedup();
            let mut seen = std::collections::BTreeSet::new();
            let ops = locs.into_iter().filter(|l| seen.insert(*l)).filter_map(|l| op_out(sem, file, l)).collect();
            FindingOut {
                number: i as u32 + 1,
                kind: f.kind.clone(),
                frequency: f.frequency.clone(),
                rules,
                text: f.text.clone(),
                ops,
                witness_steps: f.finding.witness.len() as u64,
            }
        })
        .collect();
    Output {
        schema_version: SCHEMA_VERSION,
        command: "check".into(),
        exit_code: rep.exit_code() as u8,
        check: Some(Check {
            program: rep.program.clone(),
            file: file.to_string(),
            profile: rep.profile.clone(),
            verdict: rep.verdict.clone(),
            inconclusive: rep.limit_hit.is_some(),
            limit_hit: rep.limit_hit.clone(),
            states: rep.states as u64,
            final_states: rep.final_states as u64,
            completed_final_states: rep.completed_final_states as u64,
            findings,
        }),
        time: None,
        errors: None,
    }
}

/// The JSON of a load error of `command` (exit code 2).
pub fn load_error(command: &str, issues: &[LoadIssue]) -> Output {
    Output {
        schema_version: SCHEMA_VERSION,
        command: command.into(),
        exit_code: 2,
        check: None,
        time: None,
        errors: Some(
            issues
                .iter()
                .map(|i| ErrorOut {
                    file: i.file.clone(),
                    line: i.line,
                    column: i.column,
                    message: i.message.clone(),
                    help: i.help.clone(),
                })
                .collect(),
        ),
    }
}

impl Output {
    /// Pretty JSON with a final newline.
    pub fn to_json(&self) -> String {
        // Plain data with string keys: serialization cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}
