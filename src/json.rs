//! `--format json`: the versioned, documented output for scripts (`docs/json.md`). Every op is named the way the
//! program wrote it (rank, thread name, op number) with its file, line and column; every finding cites rule ids; no
//! internal indices, vector clocks or witness steps appear. Load errors have the same envelope. `check` and
//! `explore` share one `check` object ([`check_object`]); `explore` adds how its strategy searched ([`ExploreOut`]).

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
    /// `check`, `explore` or `time`.
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
    /// `explore` only: the strategy and what it adds about each finding (absent from other commands' output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explore: Option<ExploreOut>,
}

/// What `cuorder explore` adds to the `check` object: how its strategy searched, and per finding what showed it.
/// A field that does not apply to the strategy is null (an array: empty).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExploreOut {
    /// `exhaustive`, `random`, `pct`, `bounded` or `dpor`.
    pub strategy: String,
    /// `random`, `pct`: the seed of the first execution (execution i uses seed + i).
    pub seed: Option<u64>,
    /// `random`, `pct`: the executions run; `dpor`: the executions explored to a final state.
    pub executions: Option<u64>,
    /// `pct`: the bug depth (`--depth`).
    pub depth: Option<u32>,
    /// `bounded`: the most preemptions an execution may have (`--bound`).
    pub bound: Option<u32>,
    /// `bounded`: the states of each bound's pass, from bound 0.
    pub states_per_bound: Vec<u64>,
    /// `bounded`: the bound whose pass cut no execution (larger bounds add none), if one did.
    pub saturated_at: Option<u32>,
    /// `dpor`: executions cut short by sleep sets (an equivalent execution was explored).
    pub sleep_blocked: Option<u64>,
    /// The command-line settings that changed the program (PyTorch overrides), as `time` lists them.
    pub settings: Vec<String>,
    /// One per finding of the `check` object, in its order.
    pub findings: Vec<ExploreFinding>,
}

/// What `explore` says of one finding beyond the `check` object's [`FindingOut`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExploreFinding {
    /// The finding's `number` in the `check` object.
    pub number: u32,
    /// `random`, `pct`: the executions that showed it (out of `executions`).
    pub seen_in: Option<u64>,
    /// `random`, `pct`: the seed of the first execution that showed it.
    pub first_seed: Option<u64>,
    /// `bounded`: the bound at which it first appeared (the fewest preemptions of an execution that shows it).
    pub first_bound: Option<u32>,
    /// The artifact `--save` wrote for it (`cuorder replay FILE` reproduces it), null without `--save`.
    pub artifact: Option<String>,
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
    /// The profile's name (`portable`, `eager`, or the `name` a profile file gives).
    pub profile: String,
    /// The profile file as given on the command line (`--profile my.ron`); `None` for a built-in profile.
    pub profile_file: Option<String>,
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
    /// N7: `init` or `lazy` when the profile leaves to the platform when collectives connect (`portable`) and only
    /// executions with that choice showed the finding (collective connections made at init: NCCL < 2.22, or
    /// `NCCL_RUNTIME_CONNECT=0`, or no cuMem support; made lazily at first use: NCCL >= 2.22 by default); `null`
    /// otherwise. The text says the same in a `platform:` line.
    pub platform: Option<String>,
    /// N14: `restart` or `continue` when the profile leaves the kernel-plan order of cut groups to the platform
    /// (`portable`) and only executions with that order showed the finding (`restart`: NCCL 2.22-2.29.3, each plan
    /// restarts NCCL's point-to-point schedule at round 0; `continue`: NCCL >= 2.29.7, each plan continues where the
    /// previous one was cut); `null` otherwise. The text says the same in a `platform:` line.
    pub plan_order: Option<String>,
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
    Output {
        schema_version: SCHEMA_VERSION,
        command: "check".into(),
        exit_code: rep.verdict().exit_code(),
        check: Some(check_object(sem, rep, file)),
        time: None,
        explore: None,
        errors: None,
    }
}

/// The JSON of an `explore` report of the program read from `file`: the `check` object as `check` prints it, with
/// `explore`'s own exit code (a clean sampled or bounded search exits 3) and what its strategy adds.
pub fn explore(sem: &Semantics, rep: &Report, file: &str, exit_code: u8, explore: ExploreOut) -> Output {
    Output {
        schema_version: SCHEMA_VERSION,
        command: "explore".into(),
        exit_code,
        check: Some(check_object(sem, rep, file)),
        time: None,
        explore: Some(explore),
        errors: None,
    }
}

/// The `check` object of a report made by any strategy, its findings named as the program wrote them.
pub fn check_object(sem: &Semantics, rep: &Report, file: &str) -> Check {
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
                    locs.extend(s.other_send);
                }
            }
            // A finding that needs one platform choice of when collectives connect cites N7, as its text does.
            if f.finding.platform.is_some() {
                rules.push(cuorder_model::rule::Rule::N7.id().to_string());
            }
            // One that needs one kernel-plan order cites N14.
            if f.finding.plan_order.is_some() {
                rules.push(cuorder_model::rule::Rule::N14.id().to_string());
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
                platform: f.finding.platform.map(|c| c.name().to_string()),
                plan_order: f.finding.plan_order.map(|o| o.name().to_string()),
            }
        })
        .collect();
    Check {
        program: rep.program.clone(),
        file: file.to_string(),
        profile: sem.profile.name.clone(),
        profile_file: sem.profile.source.clone(),
        verdict: rep.verdict.clone(),
        inconclusive: rep.limit_hit.is_some(),
        limit_hit: rep.limit_hit.clone(),
        states: rep.states as u64,
        final_states: rep.final_states as u64,
        completed_final_states: rep.completed_final_states as u64,
        findings,
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
        explore: None,
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
