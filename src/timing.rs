//! What `cuorder time` and `run --timeline` print and write (issue 9): the text report (makespan, per-rank bubbles,
//! per-stream busy and idle time, the critical path), a compact text timeline with one lane per stream and host
//! thread, the `--format json` document, and Chrome trace-event JSON that Perfetto and chrome://tracing open.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use cuorder_model::describe::count;

use crate::timeline::pad;
use cuorder_model::program::RankId;
use cuorder_model::semantics::Semantics;
use cuorder_sim::cost::CostModel;
use cuorder_sim::run::Outcome;
use cuorder_sim::timed::{describe, FlowKind, Lane, PathPart, SpanKind, Summary, TimedOptions, TimedRun, Withheld};

/// Rows of the per-rank and per-stream tables the text report prints (JSON has all).
pub const MAX_TABLE_ROWS: usize = 64;
/// Critical-path entries the text report prints (JSON has all).
pub const MAX_CRITICAL_ROWS: usize = 40;
/// Lanes the text timeline draws.
pub const MAX_LANES: usize = 64;

/// A duration in ns as people read it: `35.123 ms`, `4.425 µs`, `950 ns`.
pub fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.3} µs", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

/// A lane's name: "r0 main" (host thread) or "r0 compute" (stream).
pub fn lane_name(sem: &Semantics, lane: Lane) -> String {
    match lane {
        Lane::Thread(t) => sem.thread_label(t),
        Lane::Stream(s) => format!("r{} {}", s.rank, sem.program.stream(s).name),
    }
}

/// A span's name: the kernel's name, or the op's label.
fn span_name(sem: &Semantics, sp: &cuorder_sim::timed::Span) -> String {
    let name = match &sem.op(sp.op).kind {
        cuorder_model::program::OpKind::Kernel { name, .. } => name.clone(),
        k => sem.program.op_label(sp.rank(sem), k),
    };
    match sp.answer {
        Some(true) => format!("{name}: ready"),
        Some(false) => format!("{name}: not ready"),
        None => name,
    }
}

/// The outcome in words.
pub fn outcome_text(run: &TimedRun) -> String {
    match &run.outcome {
        // N9: a watchdog turned a hang into an abort; the run ended, but the program did not do its work.
        Outcome::Completed if timed_out(run) => "timeout: a watchdog aborted a hang (below); without it this is a deadlock".into(),
        Outcome::Completed => "completed".into(),
        Outcome::Deadlock(stuck) => format!("deadlock at {}:\n{}", fmt_ns(run.makespan_ns), crate::timeline::stuck_text(stuck).trim_end()),
        Outcome::Undefined(u) => format!("undefined (rule {}) at {}: {}", u.rule, fmt_ns(run.makespan_ns), u.message),
        Outcome::StepLimit(n) => format!("stopped at the step limit ({})", count(*n as u64, "step")),
        Outcome::TimeLimit { steps, limit_ms } => format!("stopped at the time limit after {} ({limit_ms} ms)", count(*steps as u64, "step")),
        Outcome::Interrupted { steps } => format!("{} after {}", cuorder_sim::progress::INTERRUPTED, count(*steps as u64, "step")),
    }
}

/// One timed execution ([`cuorder_sim::timed::timed_run`] of `opt`) and, when it completed only through steps the
/// profile does not guarantee (the platform as generous as the profile allows), the same run taking only
/// guaranteed steps, in [`TimedRun::withheld`]: a hang there is one the platform may give (the send-first deadlock
/// of an eager send beyond the window, N2; a kernel beside a spinning NCCL kernel, S1). `withheld_run` false
/// (`--no-withheld-run`) skips that second run and says so ([`Withheld::Skipped`]).
pub fn time_run(sem: &Semantics, model: &CostModel, opt: &TimedOptions, withheld_run: bool) -> TimedRun {
    let mut run = cuorder_sim::timed::timed_run(sem, model, &TimedOptions { withhold: false, ..opt.clone() });
    if matches!(run.outcome, Outcome::Completed) && run.unguaranteed.0 > 0 && !timed_out(&run) {
        run.withheld = if withheld_run {
            let strict = cuorder_sim::timed::timed_run(sem, model, &TimedOptions { withhold: true, ..opt.clone() });
            match strict.outcome {
                Outcome::Deadlock(stuck) => Withheld::Deadlock(strict.makespan_ns, stuck),
                Outcome::StepLimit(_) | Outcome::TimeLimit { .. } | Outcome::Interrupted { .. } => Withheld::Cut,
                _ => Withheld::Completed,
            }
        } else {
            Withheld::Skipped
        };
    }
    run
}

/// What `cuorder time` concludes of a run: a problem if it found one ([`has_finding`]), even if it then stopped at
/// a limit; else inconclusive if a limit (`--max-steps`, `--max-time-s`) cut it, or cut the run without the
/// unguaranteed steps (whether it hangs is not known); else done.
pub fn verdict(run: &TimedRun) -> crate::cli::Verdict {
    let cut = matches!(run.outcome, Outcome::StepLimit(_) | Outcome::TimeLimit { .. } | Outcome::Interrupted { .. }) || run.withheld == Withheld::Cut;
    crate::cli::Verdict::of_search(has_finding(run), cut)
}

/// Whether the execution found a problem (exit code 1 of `cuorder time`).
pub fn has_finding(run: &TimedRun) -> bool {
    !run.races.is_empty()
        || !run.stale.is_empty()
        || !run.overdue.is_empty()
        || matches!(run.outcome, Outcome::Deadlock(_) | Outcome::Undefined(_))
        || timed_out(run)
        || matches!(run.withheld, Withheld::Deadlock(..))
}

/// The finding of a run that completed only through steps the profile does not guarantee and deadlocks without
/// them ([`TimedRun::withheld`]), in words: the steps, the first of them, when and how the run without
/// them hangs.
pub fn withheld_text(sem: &Semantics, run: &TimedRun) -> Option<String> {
    let Withheld::Deadlock(at, stuck) = &run.withheld else { return None };
    let first = run.unguaranteed.1.map_or(String::new(), |i| {
        let (lane, what) = describe(sem, &run.schedule[i as usize], run.host_op(i as usize));
        format!(" (the first: {lane}: {what})")
    });
    Some(format!(
        "this execution completed only through {}{first}; a platform that withholds them, as the profile allows, \
         deadlocks at {}:\n{}",
        unguaranteed_text(sem, run),
        fmt_ns(*at),
        crate::timeline::stuck_text(stuck).trim_end()
    ))
}

/// "N steps that profile P does not guarantee": the steps of `run` the platform took though the profile lets it
/// withhold them ([`TimedRun::unguaranteed`]).
fn unguaranteed_text(sem: &Semantics, run: &TimedRun) -> String {
    format!("{} that profile {} does not guarantee", count(run.unguaranteed.0, "step"), sem.profile.label())
}

/// Whether a watchdog fired (N9): the run ends, as `check`'s "timeout" verdict says, with the hang aborted.
pub fn timed_out(run: &TimedRun) -> bool {
    crate::timeline::watchdog_fired(&run.schedule)
}

/// The text report of `cuorder time`.
pub fn report_text(sem: &Semantics, run: &TimedRun, sum: &Summary, file: &str) -> String {
    let mut s = String::new();
    let jitter = if run.jitter_ns > 0 { format!(", jitter {} ns", run.jitter_ns) } else { String::new() };
    let _ = writeln!(
        s,
        "{file}: one timed execution under profile {}, costs {} (seed {}{jitter}; {})",
        sem.profile.label(),
        run.costs,
        run.seed,
        count(run.schedule.len() as u64, "step")
    );
    if !run.settings.is_empty() {
        let _ = writeln!(s, "PyTorch calls lowered with {} (overriding the program's `torch:`)", run.settings.join(", "));
    }
    if run.costs.starts_with("logical") {
        // Every step costs 1: the "ns" below count steps, not time.
        let _ = writeln!(s, "(logical costs: every step takes 1 unit, printed as 1 ns; times count steps, not nanoseconds)");
    }
    let _ = writeln!(s, "outcome: {}", outcome_text(run));
    if let Some(w) = withheld_text(sem, run) {
        let _ = writeln!(s, "deadlock when withheld: {w}");
    }
    match run.withheld {
        Withheld::Cut => {
            let _ = writeln!(
                s,
                "note: this execution took {}, and the run without them stopped at a limit (--max-steps, \
                 --max-time-s) before its end: whether the program hangs without them is not known (`cuorder check` \
                 decides it)",
                unguaranteed_text(sem, run)
            );
        }
        Withheld::Skipped => {
            let _ = writeln!(
                s,
                "note: this execution took {}; --no-withheld-run skipped the run without them, so whether the program \
                 hangs without them is not known (`cuorder check` decides it)",
                unguaranteed_text(sem, run)
            );
        }
        Withheld::NotRun | Withheld::Completed | Withheld::Deadlock(..) => {}
    }
    // In time order, as the JSON findings (a race is found when its later access starts, which is not always in
    // time order: the trial saw "data race 5 at 1.210 ms" before "data race 6 at 1.055 ms").
    let mut marks: Vec<_> = run.race_marks.iter().collect();
    marks.sort_by_key(|m| m.at_ns);
    for (i, m) in marks.into_iter().enumerate() {
        let r = &run.races[m.race];
        let _ = writeln!(s, "data race {} at {}: {}", i + 1, fmt_ns(m.at_ns), crate::timeline::race_text(sem, r));
    }
    for m in &run.stale {
        let _ = writeln!(s, "stale read at {}: {}", fmt_ns(m.at_ns), crate::timeline::stale_text(sem, &m.read));
    }
    // Timeouts and overdue work in time order. A pipeline issued ahead under a short timeout can have thousands of
    // overdue launches: the first few in time, then a count.
    let overdue = &run.overdue;
    let mut watchdog: Vec<(u64, String)> =
        timeouts(sem, run).into_iter().map(|(at, text)| (at, format!("timeout at {}: {text}", fmt_ns(at)))).collect();
    watchdog.extend(overdue.iter().take(MAX_OVERDUE_LINES).map(|o| (o.fires_ns(), format!("overdue at {}: {}", fmt_ns(o.fires_ns()), overdue_what(sem, o)))));
    watchdog.sort_by_key(|(at, _)| *at);
    for (_, line) in &watchdog {
        let _ = writeln!(s, "{line}");
    }
    if overdue.len() > MAX_OVERDUE_LINES {
        let more = overdue.len() - MAX_OVERDUE_LINES;
        let _ = writeln!(s, "… {more} more overdue launch{} (--format json lists all)", if more == 1 { "" } else { "es" });
    }
    if !overdue.is_empty() {
        let _ = writeln!(s, "  ({OVERDUE_WHY})");
    }
    if !run.races.is_empty() {
        let _ = writeln!(
            s,
            "note: the times below are those of an execution with a data race: an access ran without waiting for the one \
             it races with (a kernel reading data that had not arrived, say), so they can be shorter than the program's \
             once the race is fixed; `cuorder check` names the order that is missing"
        );
    }
    // A run stopped at a limit has not ended: its last step is no makespan.
    let label = match run.outcome {
        Outcome::StepLimit(_) | Outcome::TimeLimit { .. } => "makespan so far (stopped at the limit)",
        Outcome::Interrupted { .. } => "makespan so far (interrupted by Ctrl-C)",
        _ => "makespan",
    };
    let _ = writeln!(s, "{label}: {} ({} ns)", fmt_ns(sum.makespan_ns), sum.makespan_ns);
    s.push_str(&parts_text(sum));
    s.push('\n');
    let _ = writeln!(s, "{:<8} {:>14} {:>8}", "rank", "compute", "bubble");
    for r in sum.ranks.iter().take(MAX_TABLE_ROWS) {
        let _ = writeln!(s, "{:<8} {:>14} {:>7.1}%", format!("r{}", r.rank), fmt_ns(r.compute_ns), r.bubble_fraction * 100.0);
    }
    if sum.ranks.len() > MAX_TABLE_ROWS {
        let more = sum.ranks.len() - MAX_TABLE_ROWS;
        let _ = writeln!(s, "… {more} more rank{} (--format json lists all)", if more == 1 { "" } else { "s" });
    }
    let width = sum.streams.iter().take(MAX_TABLE_ROWS).map(|x| lane_name(sem, Lane::Stream(x.stream)).chars().count()).max().unwrap_or(6).max(6);
    let _ = writeln!(s, "\n{} {:>14} {:>14} {:>6} {:>14}", pad("stream", width), "busy", "idle", "gaps", "longest gap");
    for x in sum.streams.iter().take(MAX_TABLE_ROWS) {
        let _ = writeln!(
            s,
            "{} {:>14} {:>14} {:>6} {:>14}",
            pad(&lane_name(sem, Lane::Stream(x.stream)), width),
            fmt_ns(x.busy_ns),
            fmt_ns(x.idle_ns),
            x.gaps,
            fmt_ns(x.longest_gap_ns)
        );
    }
    if sum.streams.len() > MAX_TABLE_ROWS {
        let more = sum.streams.len() - MAX_TABLE_ROWS;
        let _ = writeln!(s, "… {more} more stream{} (--format json lists all)", if more == 1 { "" } else { "s" });
    }
    let timed: Vec<_> = sum.critical_path.iter().filter(|c| c.end_ns > c.start_ns).collect();
    let _ = writeln!(
        s,
        "\ncritical path: {} step(s), {} of them taking time (in order; each enabled by the one before):",
        sum.critical_path.len(),
        timed.len()
    );
    // A long path shows its first and last rows (how it starts, and what ends the run), the middle counted.
    let (head, tail) = if timed.len() > MAX_CRITICAL_ROWS { (MAX_CRITICAL_ROWS / 2, MAX_CRITICAL_ROWS / 2) } else { (timed.len(), 0) };
    for (n, c) in timed.iter().enumerate() {
        if n == head && tail > 0 {
            let _ = writeln!(s, "  … {} more (--format json lists all)", timed.len() - head - tail);
        }
        if n >= head && n < timed.len() - tail {
            continue;
        }
        let i = c.step as usize;
        let (lane, what) = describe(sem, &run.schedule[i], run.host_op(i));
        let _ = writeln!(s, "  {:>12} → {:>12}  {:>12}  {lane}: {what}", fmt_ns(c.start_ns), fmt_ns(c.end_ns), fmt_ns(c.end_ns - c.start_ns));
    }
    s
}

/// Where the makespan goes: the critical path's time by kind of step ([`Summary::critical_parts`]), one row each,
/// and a note when a tenth of it or more is connection set-up (N7), which a job pays in its first iteration only.
fn parts_text(sum: &Summary) -> String {
    let mut s = String::new();
    if sum.critical_parts.is_empty() {
        return s;
    }
    let share = |ns: u64| if sum.makespan_ns == 0 { 0.0 } else { ns as f64 * 100.0 / sum.makespan_ns as f64 };
    let _ = writeln!(s, "where it goes (the critical path's time by kind of step):");
    let width = sum.critical_parts.iter().map(|p| p.part.label().len()).max().unwrap_or(0);
    for p in &sum.critical_parts {
        let _ = writeln!(s, "  {:<width$} {:>12} {:>6.1}%  {}", p.part.label(), fmt_ns(p.ns), share(p.ns), count(u64::from(p.steps), "step"));
    }
    if let Some(setup) = sum.critical_parts.iter().find(|p| p.part == PathPart::ConnectionSetup && share(p.ns) >= 10.0) {
        let _ = writeln!(
            s,
            "note: {:.1}% of this makespan is NCCL's lazy connection set-up (N7): the first send, recv or collective \
             between two ranks connects them, which a job pays in its first iteration only. `--connect-ns 0` times \
             the program as a later iteration runs (a set-up then costs nothing; the ranks still meet).",
            share(setup.ns)
        );
    }
    s
}

/// A kernel's mark in the text timeline: the first ASCII letter or digit of its name, upper case (`K` if none), so
/// that no kernel is drawn with a built-in lower-case mark (`c` copy, `n` NCCL: a kernel named `compute` drew `c`).
fn kernel_letter(name: &str) -> u8 {
    name.bytes().find(|b| b.is_ascii_alphanumeric()).unwrap_or(b'k').to_ascii_uppercase()
}

/// A compact text timeline: one row per lane (host threads and streams, by rank), `width` columns spanning
/// `[0, makespan]`; a column shows what runs in it: a kernel's first letter in upper case, `c` a copy, `n` an NCCL launch, `|` a
/// host call, `=` a blocked host call, `!` the start of an access that raced, ` ` nothing; then a legend.
pub fn lanes_text(sem: &Semantics, run: &TimedRun, width: usize) -> String {
    let width = width.max(10);
    let mk = run.makespan_ns.max(1);
    let mut lanes: BTreeMap<(u32, u8, Lane), Vec<u8>> = BTreeMap::new();
    let col = |t: u64| ((u128::from(t) * width as u128 / u128::from(mk)) as usize).min(width - 1);
    for sp in &run.spans {
        let key = (sp.rank(sem), matches!(sp.lane, Lane::Stream(_)) as u8, sp.lane);
        let row = lanes.entry(key).or_insert_with(|| vec![b' '; width]);
        let ch = match sp.kind {
            SpanKind::Kernel => kernel_letter(&span_name(sem, sp)),
            SpanKind::Copy => b'c',
            SpanKind::HostFunc => b'h',
            SpanKind::Nccl => b'n',
            SpanKind::HostCall => b'|',
            SpanKind::HostBlocked => b'=',
        };
        let (a, b) = (col(sp.start_ns), col(sp.end_ns.saturating_sub(1).max(sp.start_ns)));
        for c in row.iter_mut().take(b + 1).skip(a) {
            // Host calls are short: never overwrite longer work drawn in the same column.
            if *c == b' ' || sp.kind != SpanKind::HostCall {
                *c = ch;
            }
        }
    }
    for m in &run.race_marks {
        let lane = m.lane;
        let row = lanes.entry((lane.rank(sem), matches!(lane, Lane::Stream(_)) as u8, lane)).or_insert_with(|| vec![b' '; width]);
        row[col(m.at_ns)] = b'!';
    }
    // The legend: which kernels each letter stands for, by distinct name in order of first appearance (a
    // pipeline's 512 kernels are a few names with microbatch numbers; two names may share a letter).
    let mut letters: BTreeMap<u8, Vec<String>> = BTreeMap::new();
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    for sp in run.spans.iter().filter(|sp| sp.kind == SpanKind::Kernel) {
        let name = span_name(sem, sp);
        if !seen.contains(&name) {
            letters.entry(kernel_letter(&name)).or_default().push(name.clone());
            seen.insert(name);
        }
    }
    let names: Vec<String> = lanes.keys().take(MAX_LANES).map(|k| lane_name(sem, k.2)).collect();
    let w = names.iter().map(|n| n.chars().count()).max().unwrap_or(4).max(4);
    let mut s = String::new();
    // The end of the axis under the last column, a space at least after the 0 (`--lanes 10` printed "0418.353 ms").
    let end = fmt_ns(run.makespan_ns);
    let _ = writeln!(s, "{} 0{:>width$}", pad("", w), end, width = width.max(end.chars().count() + 1));
    for ((_, row), name) in lanes.iter().zip(&names) {
        let _ = writeln!(s, "{} |{}|", pad(name, w), String::from_utf8_lossy(row));
    }
    if lanes.len() > MAX_LANES {
        let more = lanes.len() - MAX_LANES;
        let _ = writeln!(s, "… {more} more lane{} (the Chrome trace of --timeline has all)", if more == 1 { "" } else { "s" });
    }
    const NAMES_PER_LETTER: usize = 3;
    let kernels: Vec<String> = letters
        .iter()
        .map(|(c, names)| {
            let shown = names.iter().take(NAMES_PER_LETTER).map(String::as_str).collect::<Vec<_>>().join(", ");
            match names.len().saturating_sub(NAMES_PER_LETTER) {
                0 => format!("{} {shown}", *c as char),
                more => format!("{} {shown} and {more} more", *c as char),
            }
        })
        .collect();
    let kernels = if kernels.is_empty() { String::new() } else { format!("kernels by first letter, upper case: {}; ", kernels.join("; ")) };
    let _ = writeln!(
        s,
        "legend: {kernels}c copy or memset, h host function, n NCCL, | host call, = host blocked, ! race{}",
        if run.spans.iter().any(|sp| sp.unfinished) { "; unfinished work runs to the right edge" } else { "" }
    );
    s
}

/// The `time` object of `--format json` (docs/json.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeOut {
    pub program: String,
    pub file: String,
    /// The profile's name (`portable`, `eager`, or the `name` a profile file gives).
    pub profile: String,
    /// The profile file as given on the command line (`--profile my.ron`); `None` for a built-in profile.
    pub profile_file: Option<String>,
    pub costs: String,
    pub seed: u64,
    /// The `--jitter` bound, ns (0: none); with `seed`, what reproduces the run.
    pub jitter_ns: u64,
    /// Command-line settings that changed the program (PyTorch overrides such as `--torch-init lazy`); empty if none.
    pub settings: Vec<String>,
    /// `completed`, `timeout` (a watchdog aborted a hang; N9), `deadlock`, `undefined` or `step limit`.
    pub outcome: String,
    pub makespan_ns: u64,
    pub steps: u64,
    /// How many of the steps the profile does not guarantee (the platform is as generous as the profile allows).
    pub unguaranteed_steps: u64,
    pub races: u64,
    /// What this execution found, in time order (at the same time: races, stale reads, a deadlock, undefined
    /// behaviour, timeouts, then work a watchdog would abort, `overdue`).
    pub findings: Vec<TimeFinding>,
    pub ranks: Vec<RankOut>,
    pub streams: Vec<StreamOut>,
    pub critical_path: Vec<CriticalOut>,
    /// The critical path's time by kind of step, most first ([`cuorder_sim::timed::Summary::critical_parts`]);
    /// the parts add up to `makespan_ns`.
    pub critical_parts: Vec<PartOut>,
}

/// The critical path's time on one kind of step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartOut {
    /// `kernel`, `copy`, `host_func`, `nccl_launch`, `transfer`, `connection_setup`, `host`, `watchdog` or
    /// `marker` ([`PathPart`]).
    pub part: PathPart,
    pub ns: u64,
    pub steps: u32,
}

/// One finding of a timed execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeFinding {
    /// `data race`, `stale read`, `deadlock`, `undefined`, `timeout` or `overdue` ([`cuorder_sim::timed::Overdue`]).
    pub kind: String,
    /// When: a race, the later start of its two accesses; a deadlock or undefined behaviour, when the last step
    /// happened before the stall.
    pub at_ns: u64,
    /// The finding as the text output prints it (the two ops and the buffer; the wait-for edges; the rule).
    pub text: String,
}

/// One rank's compute time and bubble fraction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankOut {
    pub rank: u32,
    pub compute_ns: u64,
    pub bubble_fraction: f64,
}

/// One stream's busy and idle time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOut {
    pub rank: u32,
    pub stream: String,
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub gaps: u32,
    pub longest_gap_ns: u64,
}

/// One step of the critical path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CriticalOut {
    pub lane: String,
    pub what: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// The `time` object of the JSON output.
pub fn time_out(sem: &Semantics, run: &TimedRun, sum: &Summary, file: &str) -> TimeOut {
    // In time order (docs/json.md); findings at the same time in this order (a stable sort).
    let mut findings: Vec<TimeFinding> = run
        .race_marks
        .iter()
        .map(|m| TimeFinding { kind: "data race".into(), at_ns: m.at_ns, text: crate::timeline::race_text(sem, &run.races[m.race]) })
        .chain(run.stale.iter().map(|m| TimeFinding { kind: "stale read".into(), at_ns: m.at_ns, text: crate::timeline::stale_text(sem, &m.read) }))
        .chain(match &run.outcome {
            Outcome::Deadlock(d) => {
                Some(TimeFinding { kind: "deadlock".into(), at_ns: run.makespan_ns, text: crate::timeline::stuck_text(d).trim_end().to_string() })
            }
            Outcome::Undefined(u) => Some(TimeFinding {
                kind: "undefined".into(),
                at_ns: run.makespan_ns,
                text: format!("rule {}: {}", u.rule, u.message),
            }),
            _ => None,
        })
        .chain(withheld_text(sem, run).map(|text| TimeFinding {
            kind: "deadlock when withheld".into(),
            at_ns: match run.withheld {
                Withheld::Deadlock(at, _) => at,
                _ => 0,
            },
            text,
        }))
        .chain(timeouts(sem, run).into_iter().map(|(at_ns, text)| TimeFinding { kind: "timeout".into(), at_ns, text }))
        .chain(run.overdue.iter().map(|o| TimeFinding { kind: "overdue".into(), at_ns: o.fires_ns(), text: overdue_text(sem, o) }))
        .collect();
    findings.sort_by_key(|f| f.at_ns);
    TimeOut {
        program: run.program.clone(),
        file: file.to_string(),
        profile: run.profile.clone(),
        profile_file: sem.profile.source.clone(),
        costs: run.costs.clone(),
        seed: run.seed,
        jitter_ns: run.jitter_ns,
        settings: run.settings.clone(),
        outcome: match run.outcome {
            Outcome::Completed if timed_out(run) => "timeout",
            Outcome::Completed => "completed",
            Outcome::Deadlock(_) => "deadlock",
            Outcome::Undefined(_) => "undefined",
            Outcome::StepLimit(_) => "step limit",
            Outcome::TimeLimit { .. } => "time limit",
            Outcome::Interrupted { .. } => "interrupted",
        }
        .into(),
        makespan_ns: sum.makespan_ns,
        steps: run.schedule.len() as u64,
        unguaranteed_steps: run.unguaranteed.0,
        races: run.races.len() as u64,
        findings,
        ranks: sum.ranks.iter().map(|r| RankOut { rank: r.rank, compute_ns: r.compute_ns, bubble_fraction: r.bubble_fraction }).collect(),
        streams: sum
            .streams
            .iter()
            .map(|x| StreamOut {
                rank: x.stream.rank,
                stream: sem.program.stream(x.stream).name.clone(),
                busy_ns: x.busy_ns,
                idle_ns: x.idle_ns,
                gaps: x.gaps,
                longest_gap_ns: x.longest_gap_ns,
            })
            .collect(),
        critical_path: sum
            .critical_path
            .iter()
            .map(|c| {
                let i = c.step as usize;
                let (lane, what) = describe(sem, &run.schedule[i], run.host_op(i));
                CriticalOut { lane, what, start_ns: c.start_ns, end_ns: c.end_ns }
            })
            .collect(),
        critical_parts: sum.critical_parts.iter().map(|p| PartOut { part: p.part, ns: p.ns, steps: p.steps }).collect(),
    }
}

/// Microseconds with nanosecond precision, as the trace-event format wants `ts` and `dur`.
fn us(ns: u64) -> Value {
    json!(ns as f64 / 1000.0)
}

/// The execution as Chrome trace-event JSON (the "JSON Object Format" of the Trace Event Format document, which
/// Perfetto's legacy importer reads): one process per rank, one thread per host thread and per stream, a complete
/// (`X`) event per kernel, copy, NCCL launch and host call, flow (`s`/`f`) arrows send→recv and record→wait, and an
/// instant (`i`) event per race and for a deadlock or undefined behaviour.
pub fn chrome_trace(sem: &Semantics, run: &TimedRun) -> Value {
    let mut ev: Vec<Value> = vec![];
    // tid: host threads first (thread index within the rank), then streams (1000 + stream index).
    let tid = |lane: Lane| -> u64 {
        match lane {
            Lane::Thread(t) => u64::from(sem.thread_of[t as usize].1),
            Lane::Stream(s) => 1000 + u64::from(s.index),
        }
    };
    for (r, rank) in sem.program.ranks.iter().enumerate() {
        ev.push(json!({"name": "process_name", "ph": "M", "pid": r, "tid": 0, "args": {"name": format!("rank {r}")}}));
        ev.push(json!({"name": "process_sort_index", "ph": "M", "pid": r, "tid": 0, "args": {"sort_index": r}}));
        for (ti, th) in rank.threads.iter().enumerate() {
            ev.push(json!({"name": "thread_name", "ph": "M", "pid": r, "tid": ti, "args": {"name": format!("host {}", th.name)}}));
            ev.push(json!({"name": "thread_sort_index", "ph": "M", "pid": r, "tid": ti, "args": {"sort_index": ti}}));
        }
        for (si, st) in rank.streams.iter().enumerate() {
            ev.push(json!({"name": "thread_name", "ph": "M", "pid": r, "tid": 1000 + si, "args": {"name": format!("stream {}", st.name)}}));
            ev.push(json!({"name": "thread_sort_index", "ph": "M", "pid": r, "tid": 1000 + si, "args": {"sort_index": 1000 + si}}));
        }
    }
    for sp in &run.spans {
        let cat = match sp.kind {
            SpanKind::Kernel => "kernel",
            SpanKind::Copy => "copy",
            SpanKind::HostFunc => "host_func",
            SpanKind::Nccl => "nccl",
            SpanKind::HostCall => "host",
            SpanKind::HostBlocked => "host blocked",
        };
        let op = sem.op(sp.op);
        let mut args = json!({"op": format!("#{}", sp.op.op), "thread": sem.thread_label(sp.op.thread), "line": op.origin.line, "column": op.origin.column});
        let mut name = span_name(sem, sp);
        if sp.unfinished {
            // Still running (or blocked) when the run stopped: drawn to its end, and named so.
            name.push_str(" (unfinished)");
            args["unfinished"] = json!(true);
        }
        ev.push(json!({
            "name": name, "cat": cat, "ph": "X", "pid": sp.rank(sem), "tid": tid(sp.lane),
            "ts": us(sp.start_ns), "dur": us(sp.end_ns - sp.start_ns), "args": args,
        }));
    }
    // A flow's start binds to the slice enclosing it on its track, and so does its end with `"bp": "e"`; an end
    // without it binds to the next slice that starts on its track (Trace Event Format, "Flow Events"). Perfetto drops
    // an arrow whose point has no slice to bind to, which most record → wait arrows had: a record ends between
    // slices, and a wait gates the next kernel, which starts after it. So a start outside every slice moves back into
    // the last slice that ended before it on its track (to its last nanosecond), and an end binds to its enclosing
    // slice if it has one (or the slice that ends exactly there, back by a nanosecond), else to the next one. A start
    // with no slice at or before it on its track (an event recorded on a stream that had run nothing: it captures no
    // work, S3, and orders nothing), or an end with no slice at, ending at or after it, draws no arrow.
    let mut lanes: BTreeMap<(RankId, Lane), Vec<(u64, u64)>> = BTreeMap::new();
    for sp in &run.spans {
        lanes.entry((sp.rank(sem), sp.lane)).or_default().push((sp.start_ns, sp.end_ns));
    }
    for v in lanes.values_mut() {
        v.sort_unstable();
    }
    // The spans of one track do not overlap (a stream runs its items in order, a host thread its calls), so the
    // spans that started by `t` end in order too: the last of them is the only one that can enclose `t`.
    let started_by = |rank: RankId, lane: Lane, t: u64| -> &[(u64, u64)] {
        lanes.get(&(rank, lane)).map_or(&[], |v| &v[..v.partition_point(|&(a, _)| a <= t)])
    };
    let enclosing = |rank: RankId, lane: Lane, t: u64| -> bool { started_by(rank, lane, t).last().is_some_and(|&(_, b)| t < b) };
    let anchor_start = |rank: RankId, lane: Lane, t: u64| -> Option<u64> {
        if enclosing(rank, lane, t) {
            return Some(t);
        }
        started_by(rank, lane, t).iter().rev().find(|&&(a, b)| b <= t && a < b).map(|&(_, b)| b - 1)
    };
    for (i, f) in run.flows.iter().enumerate() {
        let name = match f.kind {
            FlowKind::SendRecv => "send → recv",
            FlowKind::RecordWait => "record → wait",
        };
        let Some(from_ns) = anchor_start(f.from_rank, f.from, f.from_ns) else { continue };
        // A recv's data arrives as its launch ends: that slice ends exactly at the arrow's end, and binds it.
        let ended_at = started_by(f.to_rank, f.to, f.to_ns).last().is_some_and(|&(a, b)| a < b && b == f.to_ns);
        let later = lanes.get(&(f.to_rank, f.to)).is_some_and(|v| v.last().is_some_and(|&(a, _)| a > f.to_ns));
        let end = if ended_at {
            json!({"name": name, "cat": "flow", "ph": "f", "bp": "e", "id": i, "pid": f.to_rank, "tid": tid(f.to), "ts": us(f.to_ns - 1)})
        } else if enclosing(f.to_rank, f.to, f.to_ns) {
            json!({"name": name, "cat": "flow", "ph": "f", "bp": "e", "id": i, "pid": f.to_rank, "tid": tid(f.to), "ts": us(f.to_ns)})
        } else if later {
            json!({"name": name, "cat": "flow", "ph": "f", "id": i, "pid": f.to_rank, "tid": tid(f.to), "ts": us(f.to_ns)})
        } else {
            continue;
        };
        ev.push(json!({"name": name, "cat": "flow", "ph": "s", "id": i, "pid": f.from_rank, "tid": tid(f.from), "ts": us(from_ns)}));
        ev.push(end);
    }
    for m in &run.race_marks {
        let r = &run.races[m.race];
        ev.push(json!({"name": "data race", "cat": "finding", "ph": "i", "s": "t", "pid": m.lane.rank(sem), "tid": tid(m.lane), "ts": us(m.at_ns), "args": {"race": crate::timeline::race_text(sem, r)}}));
    }
    for m in &run.stale {
        let loc = m.read.check;
        let lane = sem.info(loc).stream.map_or(Lane::Thread(loc.thread), Lane::Stream);
        ev.push(json!({"name": "stale read", "cat": "finding", "ph": "i", "s": "t", "pid": lane.rank(sem), "tid": tid(lane), "ts": us(m.at_ns), "args": {"stale read": crate::timeline::stale_text(sem, &m.read)}}));
    }
    match &run.outcome {
        Outcome::Deadlock(stuck) => {
            ev.push(json!({"name": "deadlock", "cat": "finding", "ph": "i", "s": "g", "pid": 0, "tid": 0, "ts": us(run.makespan_ns), "args": {"deadlock": crate::timeline::stuck_text(stuck)}}));
        }
        Outcome::Undefined(u) => {
            ev.push(json!({"name": "undefined", "cat": "finding", "ph": "i", "s": "g", "pid": 0, "tid": 0, "ts": us(run.makespan_ns), "args": {"rule": u.rule.to_string()}}));
        }
        _ => {}
    }
    for (at_ns, text) in timeouts(sem, run) {
        ev.push(json!({"name": "timeout", "cat": "finding", "ph": "i", "s": "g", "pid": 0, "tid": 0, "ts": us(at_ns), "args": {"timeout": text}}));
    }
    for o in &run.overdue {
        let lane = Lane::Stream(o.stream);
        ev.push(json!({"name": "overdue", "cat": "finding", "ph": "i", "s": "t", "pid": o.rank, "tid": tid(lane), "ts": us(o.fires_ns()), "args": {"overdue": overdue_text(sem, o)}}));
    }
    json!({
        "traceEvents": ev,
        "displayTimeUnit": "ns",
        "otherData": {
            "command": if run.replayed { "cuorder run" } else { "cuorder time" },
            "seed_role": if run.replayed { "the explored execution (cuorder run --seed)" } else { "tie-breaking and jitter (cuorder time --seed)" },
            "program": run.program, "profile": run.profile, "profile_file": sem.profile.source, "costs": run.costs, "seed": run.seed, "jitter_ns": run.jitter_ns, "settings": run.settings, "makespan_ns": run.makespan_ns, "generator": format!("cuorder {}", env!("CARGO_PKG_VERSION"))},
    })
}

/// A cost model by built-in name ([`CostModel::BUILTIN`]) or from a RON file.
///
/// Errors: the file cannot be read, or its text is not a valid cost model (the RON position and message, or the
/// field that is out of range), prefixed with the path.
pub fn load_costs(spec: &str) -> Result<CostModel, String> {
    if let Some(m) = CostModel::builtin(spec) {
        return Ok(m);
    }
    let text = std::fs::read_to_string(spec).map_err(|e| {
        format!("{spec}: not a built-in cost model ({}) and cannot be read as a file: {e}", CostModel::BUILTIN.join(", "))
    })?;
    let mut m = CostModel::from_ron(&text).map_err(|e| format!("{spec}: {e}"))?;
    // Reports name the file, so that an edited copy of a built-in is not mistaken for it.
    m.name = format!("{} ({spec})", m.name);
    Ok(m)
}

/// Why `path` cannot take a Chrome trace, found before the run: `-` (standard output carries the report, and
/// writing a file named `-` surprised a user), or it is one of the command's `inputs` (the program, a cost model or
/// profile file: `time p.ron --timeline p.ron` overwrote the program with the trace).
pub fn trace_path_error(path: &std::path::Path, inputs: &[&std::path::Path]) -> Option<String> {
    if path == std::path::Path::new("-") {
        return Some("--timeline -: standard output carries the report; give the trace a file name".to_string());
    }
    let real = std::fs::canonicalize(path).ok()?;
    inputs.iter().find(|i| std::fs::canonicalize(i).is_ok_and(|x| x == real)).map(|i| {
        format!("--timeline {}: that is an input of this command ({}); the trace would overwrite it, so give it another name", path.display(), i.display())
    })
}

/// Writes [`chrome_trace`] to `path` (compact JSON, final newline).
///
/// Errors: the file cannot be written (message names the path).
pub fn write_chrome_trace(sem: &Semantics, run: &TimedRun, path: &std::path::Path) -> Result<(), String> {
    let text = serde_json::to_string(&chrome_trace(sem, run)).unwrap_or_default() + "\n";
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A timed prediction against a hardware run of the same program (issue 9, "Accuracy"). Times are ns from the
/// run's first host call (hardware) or from 0 (prediction); device times are moved to the host clock with the
/// rank's clock anchor (one pairing per rank, no drift correction).
#[derive(Clone, Debug, PartialEq)]
pub struct Accuracy {
    /// From the first host call entered to the last one returned.
    pub measured_makespan_ns: u64,
    pub predicted_makespan_ns: u64,
    /// Kernels with a measured device end and a predicted span.
    pub kernels: usize,
    /// Median and largest |predicted end − measured end| over those kernels.
    pub kernel_end_median_abs_err_ns: u64,
    pub kernel_end_max_abs_err_ns: u64,
    /// Median |predicted duration − measured duration| / measured duration over those kernels.
    pub kernel_duration_median_rel_err: f64,
}

impl Accuracy {
    /// `(predicted − measured) / measured` of the makespan.
    pub fn makespan_rel_err(&self) -> f64 {
        (self.predicted_makespan_ns as f64 - self.measured_makespan_ns as f64) / self.measured_makespan_ns.max(1) as f64
    }

    /// One line for people.
    pub fn to_text(&self) -> String {
        format!(
            "against the hardware run: makespan measured {}, predicted {} ({:+.1}%); kernel ends over {}: median |error| {}, max {}; kernel durations: median relative error {:.1}%",
            fmt_ns(self.measured_makespan_ns),
            fmt_ns(self.predicted_makespan_ns),
            self.makespan_rel_err() * 100.0,
            count(self.kernels as u64, "kernel"),
            fmt_ns(self.kernel_end_median_abs_err_ns),
            fmt_ns(self.kernel_end_max_abs_err_ns),
            self.kernel_duration_median_rel_err * 100.0
        )
    }
}

/// Compares a timed run with a hardware observation of the same program.
///
/// Errors: the hardware run did not complete, or the observation has no host times (nothing to compare), said in
/// words.
pub fn accuracy(sem: &Semantics, run: &TimedRun, obs: &cuorder_model::observation::Observation) -> Result<Accuracy, String> {
    if !matches!(obs.outcome, cuorder_model::observation::Outcome::Completed) {
        return Err("the hardware run did not complete (the watchdog fired): it has no makespan to compare".into());
    }
    let origin = obs.ops.iter().filter_map(|o| o.host_enter_ns).min().ok_or("the observation has no host call times")?;
    let end = obs.ops.iter().filter_map(|o| o.host_return_ns).max().ok_or("no host call of the observation returned")?;
    let anchor: BTreeMap<u32, i128> = obs
        .clock_anchors
        .iter()
        .map(|a| (a.rank, (i128::from(a.host_before_ns) + i128::from(a.host_after_ns)) / 2 - i128::from(a.gpu_ns)))
        .collect();
    let mut predicted: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
    for sp in run.spans.iter().filter(|s| s.kind == SpanKind::Kernel) {
        predicted.insert((sp.op.thread, sp.op.op), (sp.start_ns, sp.end_ns));
    }
    let mut end_err: Vec<u64> = vec![];
    let mut dur_err: Vec<f64> = vec![];
    for o in obs.ops.iter().filter(|o| o.kind == "Kernel") {
        let Some(&off) = anchor.get(&o.op.rank) else { continue };
        let Some(dev) = o.device else { continue };
        let (Some(ds), Some(de)) = (dev.start_ns, dev.end_ns) else { continue };
        let Some(&base) = sem.thread_base.get(o.op.rank as usize) else { continue };
        let Some(&(ps, pe)) = predicted.get(&(base + o.op.thread, o.op.index)) else { continue };
        let measured_end = i128::from(de) + off - i128::from(origin);
        end_err.push((i128::from(pe) - measured_end).unsigned_abs() as u64);
        let md = de.saturating_sub(ds).max(1) as f64;
        dur_err.push(((pe - ps) as f64 - md).abs() / md);
    }
    end_err.sort_unstable();
    dur_err.sort_by(|a, b| a.total_cmp(b));
    Ok(Accuracy {
        measured_makespan_ns: end - origin,
        predicted_makespan_ns: run.makespan_ns,
        kernels: end_err.len(),
        kernel_end_median_abs_err_ns: end_err.get(end_err.len() / 2).copied().unwrap_or(0),
        kernel_end_max_abs_err_ns: end_err.last().copied().unwrap_or(0),
        kernel_duration_median_rel_err: dur_err.get(dur_err.len() / 2).copied().unwrap_or(0.0),
    })
}

/// Overdue launches the text report lists one by one.
const MAX_OVERDUE_LINES: usize = 10;

/// What an overdue launch means, said once under the list (and in each JSON finding).
const OVERDUE_WHY: &str = "ProcessGroupNCCL aborts work older than its timeout (N9); the model fires a watchdog only on a hang, so this run goes on";

/// A watched launch that outlived its watchdog's timeout ([`cuorder_sim::timed::Overdue`]): which, and how long.
fn overdue_what(sem: &Semantics, o: &cuorder_sim::timed::Overdue) -> String {
    let (r, t) = sem.thread_of[o.op.thread as usize];
    let enqueued = if o.item.loc() != o.op {
        format!(", enqueued by #{} {}", o.item.op, sem.program.op_label(r, &sem.op(o.item.loc()).kind))
    } else {
        String::new()
    };
    format!(
        "{}{} (its launch on {}{enqueued}) ran {} from its call ({} to {}{}), past the watchdog's {}",
        sem.op_label(o.op),
        sem.program.op_where(r, t, o.op.op),
        sem.comm_name(o.comm),
        fmt_ns(o.ended_ns - o.issued_ns),
        fmt_ns(o.issued_ns),
        fmt_ns(o.ended_ns),
        if o.unfinished { ", still running when the run stopped" } else { "" },
        fmt_ns(o.timeout_ns)
    )
}

/// [`overdue_what`] and why it matters, for a JSON finding or a trace event.
fn overdue_text(sem: &Semantics, o: &cuorder_sim::timed::Overdue) -> String {
    format!("{}: {OVERDUE_WHY}", overdue_what(sem, o))
}

/// The watchdog firings of a timed run (N9): when, and what they aborted.
fn timeouts(sem: &Semantics, run: &TimedRun) -> Vec<(u64, String)> {
    run.schedule
        .iter()
        .zip(&run.times_ns)
        .filter_map(|(step, at)| match step {
            cuorder_model::semantics::Step::Watchdog { rank } => {
                let watched: Vec<&str> = sem.watched_comms(*rank).map(|(c, _)| sem.comm_name(c)).collect();
                Some((
                    *at,
                    format!(
                        "hang turned into abort after timeout: the watchdog of r{rank} aborted {} (N9, N13)",
                        watched.join(", ")
                    ),
                ))
            }
            _ => None,
        })
        .collect()
}
