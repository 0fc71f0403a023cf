//! Renders one execution (a model trace) as a readable timeline: one row per event, in step order, with the lane
//! (host thread or stream) in its own column, grouped by rank in column order.

use cuorder_model::describe::count;
use cuorder_model::semantics::Semantics;
use cuorder_sim::run::{Outcome, Trace};

/// Lane names (host thread or stream labels) longer than this many characters are cut, with `…`, in the lane
/// column (thread names have no length limit).
pub const MAX_LANE_CHARS: usize = 40;

/// The lane as the column shows it: at most [`MAX_LANE_CHARS`] characters.
fn lane(l: &str) -> String {
    if l.chars().count() <= MAX_LANE_CHARS {
        l.to_string()
    } else {
        l.chars().take(MAX_LANE_CHARS - 1).chain(std::iter::once('…')).collect()
    }
}

/// The timeline of a trace as text, followed by the outcome and the races seen.
pub fn render(sem: &Semantics, trace: &Trace) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "{}: one execution under profile {} ({}; {})\n\n",
        trace.program,
        trace.profile.label(),
        trace.scheduler,
        count(trace.schedule.len() as u64, "step")
    ));
    let width = trace.events.iter().map(|e| lane(&e.lane).chars().count()).max().unwrap_or(4).max(4);
    s.push_str(&format!("{:>5}  {}  event\n", "step", pad("lane", width)));
    for e in &trace.events {
        s.push_str(&format!("{:>5}  {}  {}\n", e.step, pad(&lane(&e.lane), width), e.text));
    }
    s.push('\n');
    let replay = trace.scheduler == "replay";
    match &trace.outcome {
        // N9: the run ended (or a witness's schedule, `--witness`, did), but only because a watchdog aborted a hang
        // (as `time` and `check` say).
        Outcome::Completed | Outcome::StepLimit(_)
            if watchdog_fired(&trace.schedule) && (replay || matches!(trace.outcome, Outcome::Completed)) =>
        {
            s.push_str("outcome: timeout: a watchdog aborted a hang (the \"watchdog\" event above); without it this is a deadlock\n")
        }
        Outcome::Completed => s.push_str("outcome: completed\n"),
        Outcome::StepLimit(n) if replay => {
            s.push_str(&format!("outcome: end of the replayed schedule ({})\n", count(*n as u64, "step")))
        }
        Outcome::StepLimit(n) => s.push_str(&format!("outcome: stopped at the step limit ({})\n", count(*n as u64, "step"))),
        Outcome::TimeLimit { steps, limit_ms } => s.push_str(&format!(
            "outcome: stopped at the time limit after {} (limit max_time = {limit_ms} ms)\n",
            count(*steps as u64, "step")
        )),
        Outcome::Interrupted { steps } => {
            s.push_str(&format!("outcome: {} after {}\n", cuorder_sim::progress::INTERRUPTED, count(*steps as u64, "step")))
        }
        Outcome::Undefined(u) => s.push_str(&format!("outcome: undefined (rule {}): {}\n", u.rule, u.message)),
        Outcome::Deadlock(d) => {
            s.push_str("outcome: deadlock\n");
            s.push_str(&stuck_text(d));
        }
    }
    for r in &trace.races {
        s.push_str(&format!("data race: {}\n", race_text(sem, r)));
    }
    for r in &trace.stale {
        s.push_str(&format!("stale read: {}\n", stale_text(sem, r)));
    }
    s
}

/// A deadlock's wait-for edges, numbered, and where each blocked host thread is, under the headings `check` prints
/// ("wait-for cycle:" or "wait-for chain ...:", then "host threads:"), each line indented by `indent`. Without the
/// headings a blocked thread read as listed twice (as an edge and as a thread).
pub fn stuck_lines(d: &cuorder_model::semantics::Stuck, indent: &str, when: &str) -> String {
    let mut s = String::new();
    let head = if d.is_cycle { "wait-for cycle" } else { "wait-for chain" };
    let tail = if d.is_cycle || !when.is_empty() { "" } else { " (ends in a wait that nothing satisfies)" };
    s.push_str(&format!("{indent}{head}{when}{tail}:\n"));
    for (i, e) in d.cycle.iter().enumerate() {
        s.push_str(&format!("{indent}  {}. {}\n", i + 1, e.text));
    }
    s.push_str(&format!("{indent}host threads:\n"));
    for b in &d.blocked {
        s.push_str(&format!("{indent}  {b}\n"));
    }
    s
}

/// [`stuck_lines`] indented by two spaces (`run`, `time`).
pub fn stuck_text(d: &cuorder_model::semantics::Stuck) -> String {
    stuck_lines(d, "  ", "")
}

/// Whether a watchdog fired in this schedule (N9): the execution ended because it aborted a hang (`run`'s and
/// `time`'s outcome "timeout").
pub fn watchdog_fired(schedule: &[cuorder_model::semantics::Step]) -> bool {
    schedule.iter().any(|s| matches!(s, cuorder_model::semantics::Step::Watchdog { .. }))
}

/// A failed value assertion in one line (V1): "OP expects what OP wrote, but that write does not happen before it".
pub fn stale_text(sem: &Semantics, r: &cuorder_model::semantics::StaleRead) -> String {
    match r.other_send {
        Some(send) => format!(
            "{} expects what {} received from the send it names, but that recv matched {} (N3, V1)",
            sem.op_label(r.check),
            sem.op_label(r.writer),
            sem.op_label(send)
        ),
        None => format!(
            "{} expects what {} wrote, but that write does not happen before the read (V1)",
            sem.op_label(r.check),
            sem.op_label(r.writer)
        ),
    }
}

/// A race in one line: "OP and OP on rR BUFFER".
pub fn race_text(sem: &Semantics, r: &cuorder_model::semantics::Race) -> String {
    format!(
        "{} and {} on r{} {}",
        sem.op_label(r.first.who.loc()),
        sem.op_label(r.second.who.loc()),
        r.first.range.buf.rank,
        sem.program.buffer(r.first.range.buf).name
    )
}

/// `text` followed by spaces up to `width` characters (as `format!("{:<width$}")`, which panics for a width above
/// 65,535: `time` and `run --timeline` panicked on a stream or thread name that long, which `check` accepts; issue
/// 33). Nothing is cut: a longer text comes back whole.
pub(crate) fn pad(text: &str, width: usize) -> String {
    let n = text.chars().count();
    let mut out = String::with_capacity(text.len() + width.saturating_sub(n));
    out.push_str(text);
    out.extend(std::iter::repeat_n(' ', width.saturating_sub(n)));
    out
}
