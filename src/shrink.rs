//! `cuorder shrink` (issue 8, "replay and shrinking"): reduces the program of a saved finding to a minimal one that
//! still shows the same kind of problem, by delta debugging (Zeller & Hildebrandt, "Simplifying and isolating
//! failure-inducing input", TSE 2002) over the program's *text*: the candidates remove whole ops as written (a
//! `Group`, a `Repeat`, one `Send` inside a group) and lower the rank count, so the result is a program in the
//! user's own notation, comments and all, that loads with the same diagnostics as any other. A candidate counts when
//! it loads and the oracle (seeded random walks, then exhaustive search under a state budget) finds a problem of the
//! same kind (and, for undefined behaviour, the same rule).

use cuorder_model::profile::Profile;
use cuorder_model::program::Program;
use std::collections::BTreeSet;
use std::sync::Arc;

use cuorder_model::rule::Rule;
use cuorder_model::verdict::Problem;
use cuorder_model::semantics::{Node, Semantics};
use cuorder_sim::explore::Limits;
use cuorder_sim::progress::Progress;
use cuorder_sim::strategy::{sample, SampleOptions, Strategy};

use crate::report::RenderedFinding;

/// Budgets of the oracle.
#[derive(Clone, Debug)]
pub struct ShrinkOptions {
    /// States the exhaustive search of one candidate may visit.
    pub max_states: usize,
    /// Seeded random walks tried on a candidate before the exhaustive search.
    pub walks: u64,
    /// Candidates tried at most (each costs one oracle call).
    pub max_candidates: usize,
    /// The PyTorch dialect's settings every candidate is loaded with (the artifact's).
    pub torch: cuorder_model::format::TorchOptions,
    /// The stop flag (Ctrl-C) and counters of whoever watches: when the flag is set, the shrink stops at once (the
    /// oracle's search in hand too) and returns the smallest program found so far ([`Shrunk::interrupted`]); each
    /// candidate tried counts one item. `None`: nobody watches.
    pub stop: Option<Arc<Progress>>,
}

impl Default for ShrinkOptions {
    fn default() -> Self {
        ShrinkOptions { max_states: 5_000, walks: 20, max_candidates: 2_000, torch: Default::default(), stop: None }
    }
}

impl ShrinkOptions {
    /// Whether the stop flag is set.
    fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(|p| p.stop_requested())
    }
}

/// The outcome of a shrink.
#[derive(Debug)]
pub struct Shrunk {
    /// The minimal program text.
    pub text: String,
    pub program: Program,
    /// The finding in the minimal program (its witness is the new schedule).
    pub finding: RenderedFinding,
    pub key: cuorder_model::verdict::ProblemKey,
    /// Expanded ops (all ranks and threads) before and after.
    pub ops_before: usize,
    pub ops_after: usize,
    pub ranks_before: u32,
    pub ranks_after: u32,
    /// Candidates loaded and checked.
    pub candidates: usize,
    /// Ctrl-C stopped the shrink: the program is the smallest found so far, not a minimal one.
    pub interrupted: bool,
}

/// Expanded ops of a program, over all ranks and threads.
fn op_count(p: &Program) -> usize {
    p.ranks.iter().flat_map(|r| &r.threads).map(|t| t.ops.len()).sum()
}

/// The bytes of `text` outside `//` comments, as (offset, byte, inside a string literal): the one scanner of the
/// text-level shrink (its quotes count as inside; an escaped character is skipped with its backslash).
fn code(text: &str) -> impl Iterator<Item = (usize, u8, bool)> + '_ {
    let b = text.as_bytes();
    let (mut i, mut in_str) = (0usize, false);
    std::iter::from_fn(move || {
        while i < b.len() {
            let (at, c) = (i, b[i]);
            if in_str {
                i += if c == b'\\' { 2 } else { 1 };
                in_str = c != b'"';
                if c == b'\\' {
                    continue;
                }
                return Some((at, c, true));
            }
            if c == b'/' && b.get(i + 1) == Some(&b'/') {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            i += 1;
            in_str = c == b'"';
            return Some((at, c, in_str));
        }
        None
    })
}

/// The byte range of the RON value starting at `start` in `text`, with the comma and blanks after it: up to the
/// first `,`, `]` or `)` at depth 0 outside strings and comments.
fn value_extent(text: &str, start: usize) -> (usize, usize) {
    let b = text.as_bytes();
    let mut depth = 0i32;
    for (i, c, in_str) in code(&text[start..]).map(|(i, c, s)| (start + i, c, s)) {
        if in_str {
            continue;
        }
        if matches!(c, b'(' | b'[' | b'{') {
            depth += 1;
        } else if matches!(c, b')' | b']' | b'}') {
            if depth == 0 {
                return (start, i);
            }
            depth -= 1;
        } else if c == b',' && depth == 0 {
            // Take the comma and the blanks after it.
            let mut end = i + 1;
            while end < b.len() && (b[end] == b' ' || b[end] == b'\t') {
                end += 1;
            }
            return (start, end);
        }
    }
    (start, text.len())
}

/// The ops as written: the byte ranges of every op's text, outermost first where they nest.
fn op_spans(text: &str, p: &Program) -> Vec<(usize, usize)> {
    let mut starts: Vec<usize> =
        p.ranks.iter().flat_map(|r| &r.threads).flat_map(|t| &t.ops).filter_map(|o| o.origin.offset).collect();
    starts.sort_unstable();
    starts.dedup();
    // Whole threads too (`Thread(` written at the start of a value), so that a rank's last thread can go.
    starts.extend(text.match_indices("Thread(").map(|(i, _)| i).filter(|&i| {
        text[..i].trim_end().ends_with(['[', ','])
    }));
    starts.sort_unstable();
    starts.dedup();
    let mut spans: Vec<(usize, usize)> = starts.into_iter().map(|s| value_extent(text, s)).filter(|(a, b)| b > a).collect();
    // Outermost first: by start, longest first.
    spans.sort_by_key(|(a, b)| (*a, std::cmp::Reverse(*b)));
    spans
}

/// `text` without the given byte ranges (nested ranges inside a removed one are ignored).
fn without(text: &str, remove: &[(usize, usize)]) -> String {
    let mut r: Vec<(usize, usize)> = remove.to_vec();
    r.sort_unstable();
    let (mut out, mut at) = (String::with_capacity(text.len()), 0usize);
    for (a, b) in r {
        if a < at {
            continue;
        }
        // A removal that leaves its line blank takes the whole line.
        let line_start = text[..a].rfind('\n').map_or(0, |i| i + 1);
        let rest = &text[b..];
        let line_end = rest.find('\n').map_or(text.len(), |i| b + i + 1);
        let (a, b) = if text[line_start..a].trim().is_empty() && text[b..line_end].trim().is_empty() && line_start >= at {
            (line_start, line_end)
        } else {
            (a, b)
        };
        out.push_str(&text[at..a]);
        at = b;
    }
    out.push_str(&text[at..]);
    // Lines that removals left holding only indentation go (an empty line the author wrote stays).
    let mut kept = String::with_capacity(out.len());
    for line in out.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        if body.is_empty() || !body.trim().is_empty() {
            kept.push_str(line);
        }
    }
    kept
}

/// What makes two findings "the same kind of problem": the kind; for a deadlock, whether the wait-for graph closes
/// a cycle and the rules its edges cite (a send-before-recv cycle stays one, instead of shrinking to a lone recv that
/// waits forever); for undefined behaviour, the rule broken; for a race, the kinds of the two ops (a send against a
/// kernel stays one) and the rules its hints cite (a wait that orders nothing because its record was inside an NCCL
/// group, N10, stays one); for a stale read (V1), the kind of the expected writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    pub kind: String,
    pub cycle: Option<bool>,
    /// For a deadlock: whether its wait-for graph spans two ranks or more (a cross-rank deadlock does not shrink to
    /// one rank waiting alone).
    pub cross_rank: Option<bool>,
    pub rules: BTreeSet<Rule>,
    pub ops: Vec<&'static str>,
}

/// The signature of a finding of `sem`'s program.
pub fn signature(sem: &Semantics, f: &RenderedFinding) -> Signature {
    let mut sig = Signature { kind: f.kind.clone(), cycle: None, cross_rank: None, rules: BTreeSet::new(), ops: vec![] };
    match &f.finding.problem {
        Problem::Deadlock(d) => {
            sig.cycle = Some(d.is_cycle);
            let ranks: BTreeSet<u32> = d
                .cycle
                .iter()
                .flat_map(|e| [e.from, e.to])
                .map(|n| match n {
                    Node::Thread(t) => sem.rank_of(t),
                    Node::Never(r) => r,
                    Node::Item(k) => sem.rank_of(k.thread),
                })
                .collect();
            sig.cross_rank = Some(ranks.len() >= 2);
            sig.rules.extend(d.cycle.iter().map(|e| e.reason.rule()));
        }
        Problem::Undefined(u) => {
            sig.rules.insert(u.rule);
        }
        Problem::DataRace(r) => {
            sig.ops = vec![sem.op(r.first.who.loc()).kind.name(), sem.op(r.second.who.loc()).kind.name()];
            sig.ops.sort_unstable();
            sig.rules.extend(hint_rules(&f.text));
        }
        Problem::StaleRead(r) => {
            sig.rules.insert(Rule::V1);
            sig.ops = vec![sem.op(r.writer).kind.name()];
        }
        Problem::Timeout(to) => {
            sig.cycle = Some(to.stuck.is_cycle);
            sig.rules.insert(Rule::N9);
            sig.rules.extend(to.stuck.cycle.iter().map(|e| e.reason.rule()));
        }
    }
    sig
}

/// The rules a race's hints cite ("... so it orders nothing (S3)", "... before the group's kernels (N10)"): why an
/// order the program tried to make is not there. Part of a race's signature, so that shrinking keeps the mechanism
/// (issue 10 review: the race of an event recorded inside a group shrank to one with no wait at all).
fn hint_rules(text: &str) -> BTreeSet<Rule> {
    let mut out = BTreeSet::new();
    for line in text.lines().map(str::trim_start).filter(|l| l.starts_with("hint:")) {
        for r in Rule::ALL {
            let id = r.id();
            let cited = line.match_indices(&format!("({id}")).any(|(i, m)| {
                // "(S3)" or "(S3:", not "(S30".
                !line[i + m.len()..].starts_with(|c: char| c.is_ascii_alphanumeric())
            });
            if cited {
                out.insert(r);
            }
        }
    }
    out
}

type Found = (Program, RenderedFinding, cuorder_model::verdict::ProblemKey);

/// The first finding of `sem`'s program that `wanted` accepts: seeded random walks first (cheap, and they find
/// send-before-recv deadlocks and races at once), then the exhaustive search under the state budget.
fn search(sem: &Semantics, opt: &ShrinkOptions, wanted: impl Fn(&RenderedFinding) -> bool) -> Option<(RenderedFinding, cuorder_model::verdict::ProblemKey)> {
    let progress = opt.stop.clone();
    let s = sample(sem, &SampleOptions { strategy: Strategy::Random, seed: 0, executions: opt.walks, time_limit: None, first: false, jobs: 1, max_steps: 1_000_000, progress: progress.clone() });
    let exhaustive = || cuorder_sim::explore::explore(sem, &Limits { max_states: opt.max_states, progress: progress.clone(), ..Limits::default() });
    for ex in [s.exploration].into_iter().chain(std::iter::once_with(exhaustive)) {
        let rep = crate::report::build_report(sem, &ex);
        if let Some(i) = rep.findings.iter().position(&wanted) {
            return Some((rep.findings.into_iter().nth(i)?, ex.keys[i].clone()));
        }
    }
    None
}

/// The first finding with signature `want` in `text`, if it loads.
fn oracle(name: &str, text: &str, profile: &Profile, want: &Signature, opt: &ShrinkOptions) -> Option<Found> {
    let prog = cuorder_model::format::load_with(name, text, &opt.torch).ok()?;
    let sem = Semantics::new(&prog, profile);
    let (f, key) = search(&sem, opt, |f| signature(&sem, f) == *want)?;
    Some((prog, f, key))
}

/// Replaces `best` with the first candidate that keeps the problem; counts the candidates tried in `tried`.
fn try_candidates(
    name: &str,
    profile: &Profile,
    want: &Signature,
    opt: &ShrinkOptions,
    tried: &mut usize,
    best: &mut (String, Found),
    candidates: impl Iterator<Item = String>,
) -> bool {
    for cand in candidates {
        if *tried >= opt.max_candidates || opt.stopped() {
            return false;
        }
        *tried += 1;
        let found = oracle(name, &cand, profile, want, opt);
        if let Some(p) = &opt.stop {
            p.add_item();
        }
        // A candidate whose search Ctrl-C cut short is not taken on what it found so far: it is not the one tried.
        if opt.stopped() {
            return false;
        }
        if let Some(found) = found {
            *best = (cand, found);
            return true;
        }
    }
    false
}

/// The `ranks: N` field of the program text, if written: (byte range of N, N).
fn ranks_field(text: &str) -> Option<(usize, usize, u32)> {
    let i = text.find("ranks:")?;
    let digits_start = i + 6 + text[i + 6..].len() - text[i + 6..].trim_start().len();
    let n: String = text[digits_start..].chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((digits_start, digits_start + n.len(), n.parse().ok()?))
}

/// A candidate without rank `r` (not only the last, which [`ranks_field`] lowers): the threads that run on `r` alone
/// (`Thread(.., ranks: [r], ..)`) removed, every literal rank above `r` one lower (`Rank(k)`, the lists of `ranks:`
/// and `members:`, `"name@k"`), and the program's `ranks:` one less. `None` when a literal elsewhere still names `r`
/// (a peer, a member, a qualified name, a thread shared with other ranks), or there is no `ranks:` field. Ranks
/// written as expressions (`Rank(stage + 1)`) are left as they are: the oracle rejects a candidate they break.
fn without_rank(text: &str, r: u32) -> Option<String> {
    let (_, _, n) = ranks_field(text)?;
    if n < 2 || r + 1 >= n {
        return None;
    }
    // Threads on `r` alone go; a thread on `r` and other ranks keeps `r` named (no candidate).
    let mut remove = Vec::new();
    for (start, _) in text.match_indices("Thread(") {
        let (a, e) = value_extent(text, start);
        let Some(k) = text[a..e].find("ranks: [") else { continue };
        let Some((list, _)) = int_list(text, a + k + 7) else { continue };
        match list.iter().map(|x| x.2).collect::<Vec<_>>().as_slice() {
            [only] if *only == r => remove.push((a, e)),
            many if many.contains(&r) => return None,
            _ => {}
        }
    }
    let text = without(text, &remove);
    // Every literal rank reference left, outside comments and other strings.
    let (fa, fb, _) = ranks_field(&text)?;
    let mut edits: Vec<(usize, usize, u64)> = vec![(fa, fb, u64::from(n - 1))];
    let mut lists_end = 0usize;
    for (i, c, in_str) in code(&text) {
        if i < lists_end {
            continue;
        }
        let refs: Vec<(usize, usize, u32)> = if !in_str && c == b'[' && is_rank_list(&text, i) {
            let Some((list, close)) = int_list(&text, i) else { continue };
            lists_end = close;
            list
        } else if !in_str && c == b'(' && text[..i].ends_with("Rank") && !text[..i].ends_with("_Rank") {
            digits_before(&text, i + 1, b')').into_iter().collect()
        } else if in_str && c == b'@' {
            digits_before(&text, i + 1, b'"').into_iter().collect()
        } else {
            continue;
        };
        for (a, e, k) in refs {
            if k == r {
                return None;
            }
            if k > r {
                edits.push((a, e, u64::from(k - 1)));
            }
        }
    }
    edits.sort_unstable();
    Some(replaced(&text, &edits))
}

/// Whether the `[` at `open` begins a list of ranks: a `ranks:` list (a thread's, `OnRanks`', `NewGroup`'s), a
/// `members:` list, `OnRanks`' first argument, or the second argument of `Comm("name", ..)` or `NewGroup("name", ..)`,
/// in `Some(..)` or not. Not the split sizes of `DistAllToAllSingle`, whose repeated values mean something.
fn is_rank_list(text: &str, open: usize) -> bool {
    let before = text[..open].trim_end();
    let before = before.strip_suffix("Some(").map_or(before, str::trim_end);
    if before.ends_with("ranks:") || before.ends_with("members:") || before.ends_with("OnRanks(") {
        return true;
    }
    // `Comm("w", [..])`, `NewGroup("g", [..])`: after the name and its comma.
    let Some(name) = before.strip_suffix(',').map(str::trim_end).and_then(|b| b.strip_suffix('"')) else { return false };
    name.rfind('"').is_some_and(|q| {
        let form = name[..q].trim_end();
        form.ends_with("Comm(") || form.ends_with("NewGroup(")
    })
}

/// `text` with every list of ranks ([`is_rank_list`]) that names a rank more than once written with each rank once,
/// in the order they first appear (`OnRanks([0, 0, 0], ..)` is `OnRanks([0], ..)`): lowering a number everywhere
/// ([`lowered_numbers`]) lowers the ranks of such lists too, and a rank listed twice is at best noise (`OnRanks`) and
/// at worst an error (a thread's `ranks:`, a communicator's members).
fn dedup_rank_lists(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut at, mut lists_end) = (0usize, 0usize);
    for (i, c, in_str) in code(text) {
        if in_str || c != b'[' || i < lists_end || !is_rank_list(text, i) {
            continue;
        }
        let Some((list, close)) = int_list(text, i) else { continue };
        lists_end = close;
        let mut once: Vec<u32> = Vec::with_capacity(list.len());
        for &(_, _, r) in &list {
            if !once.contains(&r) {
                once.push(r);
            }
        }
        if once.len() < list.len() {
            out.push_str(&text[at..i + 1]);
            out.push_str(&once.iter().map(u32::to_string).collect::<Vec<_>>().join(", "));
            at = close;
        }
    }
    out.push_str(&text[at..]);
    out
}

/// `text` with each byte range `(start, end, value)` (in order, not overlapping) replaced by the value.
fn replaced(text: &str, edits: &[(usize, usize, u64)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for &(a, e, v) in edits {
        out.push_str(&text[at..a]);
        out.push_str(&v.to_string());
        at = e;
    }
    out.push_str(&text[at..]);
    out
}

/// The integers of the `[..]` list whose `[` is at `open`, with their byte ranges, and the offset of its `]`; `None`
/// unless the list holds integers only.
fn int_list(text: &str, open: usize) -> Option<(Vec<(usize, usize, u32)>, usize)> {
    let b = text.as_bytes();
    let close = open + text[open..].find(']')?;
    let mut out = Vec::new();
    let mut i = open + 1;
    while i < close {
        if b[i].is_ascii_digit() {
            let e = i + b[i..close].iter().take_while(|c| c.is_ascii_digit()).count();
            out.push((i, e, text[i..e].parse().ok()?));
            i = e;
        } else if b[i] == b',' || b[i].is_ascii_whitespace() {
            i += 1;
        } else {
            return None;
        }
    }
    Some((out, close))
}

/// The integer written from `start` up to the byte `end` (`Rank(3)`, `"x@3"`): its byte range and value; `None`
/// when something else comes first.
fn digits_before(text: &str, start: usize, end: u8) -> Option<(usize, usize, u32)> {
    let b = text.as_bytes();
    let e = start + b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
    (e > start && b.get(e) == Some(&end)).then(|| text[start..e].parse().ok().map(|v| (start, e, v)))?
}

/// A byte of a name or number (`x1`, `Rank`): what a standalone literal or keyword must not touch.
fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The standalone integer literals of `text` outside comments, strings included (loop bounds are often quoted,
/// `For(i, "0..min(stages - stage - 1, 8)", ..)`), as (byte start, byte end, value): not part of a name (`x1`) or of a
/// decimal (`1.5 ms`), not a size or duration (`16 MiB`, `1 ms`), and not the `ranks:` field's value (fewer ranks is
/// its own candidate).
fn numbers(text: &str) -> Vec<(usize, usize, u64)> {
    let b = text.as_bytes();
    let skip = ranks_field(text).map(|(a, _, _)| a);
    let mut out = Vec::new();
    // The first digit of every run of digits outside comments.
    for (start, _, _) in code(text).filter(|&(i, c, _)| c.is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_digit())) {
        let end = start + b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        let before = start.checked_sub(1).map(|j| b[j]);
        // `0..8`: a `.` before the number is a range's, not a decimal point, when it is doubled.
        let after_dot = before == Some(b'.') && (start < 2 || b[start - 2] != b'.');
        let glued = before.is_some_and(is_word) || after_dot || b.get(end).is_some_and(|&c| is_word(c) || c == b'.' && b.get(end + 1).is_some_and(u8::is_ascii_digit));
        // A size or duration (`16 MiB`, `1 ms`): its value decides eager or rendezvous (N2) and timing, so lowering
        // it would change the program under other profiles than the one the finding was saved with.
        let unit = b[end..].iter().skip_while(|&&c| c == b' ').next().is_some_and(|c| c.is_ascii_alphabetic());
        if !glued && !unit && Some(start) != skip {
            if let Ok(v) = text[start..end].parse::<u64>() {
                out.push((start, end, v));
            }
        }
    }
    out
}

/// Candidates that lower one number everywhere it is written (halved, then minus one): a loop's count in an SPMD
/// program (`For(i, "0..8", ..)` with `8` also in `min(stages - stage - 1, 8)`) shrinks only when every place that
/// says it changes at once. Largest values first. A rank lowered onto another of its list is written once
/// ([`dedup_rank_lists`]).
fn lowered_numbers(text: &str) -> Vec<String> {
    let nums = numbers(text);
    let mut values: Vec<u64> = nums.iter().map(|n| n.2).filter(|&v| v > 0).collect();
    values.sort_unstable_by(|a, b| b.cmp(a));
    values.dedup();
    let mut out = Vec::new();
    for v in values {
        let mut targets = vec![v / 2];
        if v - 1 != v / 2 {
            targets.push(v - 1);
        }
        for to in targets {
            let edits: Vec<(usize, usize, u64)> = nums.iter().filter(|n| n.2 == v).map(|&(a, e, _)| (a, e, to)).collect();
            out.push(dedup_rank_lists(&replaced(text, &edits)));
        }
    }
    out
}

/// Whether program `text` has a loop (`For(` or `Repeat(` outside comments and strings): shrinking removes ops as
/// written, so what a loop repeats is kept or removed in every iteration at once.
pub fn has_loops(text: &str) -> bool {
    let b = text.as_bytes();
    code(text).any(|(i, _, in_str)| {
        !in_str
            && (b[i..].starts_with(b"For(") || b[i..].starts_with(b"Repeat("))
            && (i == 0 || !is_word(b[i - 1]))
    })
}

/// Shrinks `text` (the program `name`) while a problem of `kind` persists under `profile`.
///
/// Errors: the program does not load, or the problem is not found in it to begin with (within the budgets, or
/// before Ctrl-C stopped the search: [`ShrinkOptions::stop`]).
/// After Ctrl-C it returns the smallest program found so far ([`Shrunk::interrupted`]).
pub fn shrink(name: &str, text: &str, profile: &Profile, kind: &str, opt: &ShrinkOptions) -> Result<Shrunk, String> {
    let none = || match opt.stopped() {
        true => format!("{} before the {kind} was found in {name} (nothing shrunk)", cuorder_sim::progress::INTERRUPTED),
        false => format!("no {kind} found in {name} under profile {} within the budgets (nothing to shrink)", profile.label()),
    };
    // The first finding of the kind sets the signature every candidate must keep; it is also the original's finding.
    let prog = cuorder_model::format::load_with(name, text, &opt.torch).map_err(|_| format!("{name} does not load"))?;
    let sem = Semantics::new(&prog, profile);
    let (f, key) = search(&sem, opt, |f| f.kind == kind).ok_or_else(none)?;
    let want = signature(&sem, &f);
    drop(sem);
    let found = (prog, f, key);
    let (ops_before, ranks_before) = (op_count(&found.0), found.0.ranks.len() as u32);
    let mut best = (text.to_string(), found);
    let mut tried = 0usize;
    let fewer_ranks = |t: &str| ranks_field(t).filter(|f| f.2 > 1).map(|(a, b, n)| format!("{}{}{}", &t[..a], n - 1, &t[b..]));
    // Fewer ranks, then ddmin over the ops and threads as written, then smaller numbers, until none helps.
    loop {
        let before = best.0.len();
        while let Some(cand) = fewer_ranks(&best.0) {
            if !try_candidates(name, profile, &want, opt, &mut tried, &mut best, std::iter::once(cand)) {
                break;
            }
        }
        // Then any other rank whose threads are gone or hold it alone, the others renumbered.
        let n = ranks_field(&best.0).map_or(0, |f| f.2);
        for r in (0..n).rev() {
            if let Some(cand) = without_rank(&best.0, r) {
                try_candidates(name, profile, &want, opt, &mut tried, &mut best, std::iter::once(cand));
            }
        }
        let mut chunks = 2usize;
        loop {
            let spans = op_spans(&best.0, &best.1 .0);
            if spans.is_empty() || tried >= opt.max_candidates || opt.stopped() {
                break;
            }
            let n = chunks.min(spans.len());
            let size = spans.len().div_ceil(n);
            let text = best.0.clone();
            if try_candidates(name, profile, &want, opt, &mut tried, &mut best, spans.chunks(size).map(|c| without(&text, c))) {
                chunks = (chunks - 1).max(2);
            } else if n >= spans.len() {
                break;
            } else {
                chunks = (chunks * 2).min(spans.len());
            }
        }
        let lowered_cands = lowered_numbers(&best.0);
        let lowered = try_candidates(name, profile, &want, opt, &mut tried, &mut best, lowered_cands.into_iter());
        if (best.0.len() == before && !lowered) || tried >= opt.max_candidates || opt.stopped() {
            break;
        }
    }
    let (text, (program, finding, key)) = best;
    let interrupted = opt.stopped();
    Ok(Shrunk { ops_after: op_count(&program), ranks_after: program.ranks.len() as u32, text, program, finding, key, ops_before, ranks_before, candidates: tried, interrupted })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_extent_stops_at_the_comma_at_depth_zero_and_skips_strings_and_comments() {
        let t = r#"[Kernel("a,b", writes: ["x"]), // c)
 Send(to: Next, buf: "y")]"#;
        let (a, b) = value_extent(t, 1);
        assert_eq!(&t[a..b], r#"Kernel("a,b", writes: ["x"]), "#);
        let s = t.find("Send").unwrap();
        let (a, b) = value_extent(t, s);
        assert_eq!(&t[a..b], r#"Send(to: Next, buf: "y")"#);
    }

    #[test]
    fn a_middle_rank_goes_and_the_ranks_above_it_are_renumbered() {
        let t = "Program(\n    ranks: 4,\n    comms: [Comm(\"w\", members: [0, 2, 3])],\n    threads: [\n        Thread(\"m\", ranks: [1], ops: []),\n        Thread(\"m\", ranks: [2], ops: [Send(to: Rank(3), buf: \"x@3\", stream: \"s\")]),\n        Thread(\"m\", ranks: [3], ops: [Recv(from: Rank(2), buf: \"x\", stream: \"s\")]),\n    ],\n)";
        let c = without_rank(t, 1).unwrap();
        assert!(c.contains("ranks: 3,") && c.contains("members: [0, 1, 2]"), "{c}");
        assert!(c.contains("ranks: [1], ops: [Send(to: Rank(2), buf: \"x@2\"") && c.contains("ranks: [2], ops: [Recv(from: Rank(1)"), "{c}");
        assert!(!c.contains("ops: [])"), "rank 1's thread is gone:\n{c}");
        assert_eq!(without_rank(t, 2), None, "rank 2 is named elsewhere");
        assert_eq!(without_rank(t, 3), None, "the last rank is fewer_ranks' job");
        assert_eq!(without_rank("Program(threads: [])", 0), None, "no ranks: field");
        // Multi-byte text anywhere is only ever sliced at ASCII bytes.
        let u = t.replace("Thread(\"m\", ranks: [1]", "/* é→ */ Thread(\"mé\", ranks: [1]");
        assert!(without_rank(&u, 1).is_some_and(|c| !c.contains("mé")));
    }

    #[test]
    fn loops_are_found_outside_comments_and_strings() {
        assert!(has_loops("Program(threads: [Thread(\"t\", [For(i, 0..2, [])])])"));
        assert!(has_loops("[Repeat(3, [DeviceSync])]"));
        assert!(!has_loops("// For(i, 0..2)\n[Kernel(\"For(\", stream: \"s\"), NoFor(1)]"));
        // Regression: a multi-byte character outside `//` comments and strings (a block comment) panicked slicing
        // the text inside it.
        assert!(has_loops("/* café → */ [For(i, 0..2, [])]"));
        assert_eq!(numbers("/* é 3 */ n: 4").iter().map(|n| n.2).collect::<Vec<_>>(), [3, 4]);
    }

    #[test]
    fn numbers_are_standalone_literals_outside_comments_and_the_ranks_field() {
        let t = "// 7 comment\nProgram(ranks: 4, x: \"x1\", r: \"0..min(stages - stage - 1, 8)\", d: \"1.5 ms\", n: 12, b: \"8 MiB\")";
        let got: Vec<u64> = numbers(t).iter().map(|n| n.2).collect();
        assert_eq!(got, [0, 1, 8, 12], "sizes and durations (`8 MiB`, `1.5 ms`) are not lowered");
        let lowered = lowered_numbers(t);
        assert!(lowered[0].contains("n: 6,"), "{}", lowered[0]);
        assert!(lowered.iter().any(|c| c.contains("0..min(stages - stage - 1, 4)")), "every 8 at once");
        assert!(lowered.iter().all(|c| c.contains("ranks: 4") && c.contains("// 7 comment") && c.contains("x1") && c.contains("\"8 MiB\"")));
    }

    #[test]
    fn lowering_a_rank_onto_another_of_its_list_writes_it_once() {
        let t = "Program(ranks: 4, comms: [Comm(\"w\", [0, 1, 2])], threads: [Thread(\"m\", ranks: [1, 2], ops: [\n\
                 OnRanks([0, 1, 2], [Repeat(2, [DeviceSync])]), NewGroup(\"g\", ranks: Some([0, 2])),\n\
                 DistAllToAllSingle(output: \"o\", input: \"i\", input_split_sizes: [2, 1, 1])])])";
        // 2 -> 1 everywhere: every rank list says 1 once; the split sizes keep their repeated 1.
        let c = lowered_numbers(t).into_iter().find(|c| c.contains("Repeat(1,")).unwrap();
        assert!(c.contains("Comm(\"w\", [0, 1])") && c.contains("ranks: [1], ops") && c.contains("OnRanks([0, 1], ["), "{c}");
        assert!(c.contains("ranks: Some([0, 1])") && c.contains("input_split_sizes: [1, 1, 1]"), "{c}");
        // A list that names a rank once is left as written.
        assert_eq!(dedup_rank_lists("OnRanks([0,  2], [])"), "OnRanks([0,  2], [])");
        assert_eq!(dedup_rank_lists("// OnRanks([0, 0], [])\nOnRanks([1, 1, 0, 1], [])"), "// OnRanks([0, 0], [])\nOnRanks([1, 0], [])");
        // `OnRanks` given positionally is renumbered when a rank below it goes, like a thread's `ranks:`.
        let t = "Program(ranks: 3, threads: [Thread(\"m\", [OnRanks([0, 2], [DeviceSync])])])";
        assert_eq!(without_rank(t, 1).as_deref(), Some("Program(ranks: 2, threads: [Thread(\"m\", [OnRanks([0, 1], [DeviceSync])])])"));
        assert_eq!(without_rank(t, 0), None, "rank 0 is named");
    }

    #[test]
    fn without_drops_nested_ranges_inside_removed_ones() {
        assert_eq!(without("0123456789", &[(2, 6), (3, 4), (8, 9)]), "01679");
        // A removed op alone on its line takes the line with it.
        assert_eq!(without("[\n    A,\n    B,\n]", &[(6, 8)]), "[\n    B,\n]");
    }
}
