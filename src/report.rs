//! `cuorder check`: explores a program and renders the verdict as text (for people) or JSON (for tools). The text
//! names every op the way the program wrote it ("r0 main #3 send(to r1, x, 2 GiB, s0, world)") with its line.

use cuorder_model::program::{MemSpace, Program};
use cuorder_model::profile::Profile;
use cuorder_model::semantics::{Access, Accessor, ItemKind, Node, OpLoc, Race, Reason, Semantics, State, Stuck};
use cuorder_model::verdict::{Finding, Frequency, Problem};
use cuorder_sim::explore::{explore, Exploration, Limits};
use cuorder_sim::run::replay_state;

/// The result of `check` (or `explore`), ready to print: as text by [`Report::to_text`], as the documented JSON
/// (`docs/json.md`) by `crate::json`. It holds internal structures (the findings' witnesses, thread ids), so it is
/// not serializable itself: a raw dump of it was once `explore --format json`'s output.
#[derive(Clone, Debug)]
pub struct Report {
    pub program: String,
    /// The profile as the text names it ([`Profile::label`]): its name, and the file it was read from, if any.
    pub profile: String,
    /// "ok", "deadlock", "data race", "undefined", "stale read", or "inconclusive" (a limit stopped the search first).
    pub verdict: String,
    pub states: usize,
    pub final_states: usize,
    pub completed_final_states: usize,
    /// States stuck if the platform withholds what it may: running streams side by side (S1), eager buffering
    /// beyond the guaranteed window (N2).
    pub starved_states: usize,
    pub limit_hit: Option<String>,
    pub findings: Vec<RenderedFinding>,
    /// Of a sampling strategy (`explore --strategy random|pct`): the executions run. `states` then counts the steps
    /// they took (walks compare no states), and the text says so.
    pub sampled_executions: Option<u64>,
}

/// One finding with its text.
#[derive(Clone, Debug)]
pub struct RenderedFinding {
    pub kind: String,
    /// "always" or "sometimes".
    pub frequency: String,
    /// The explanation, several lines.
    pub text: String,
    pub finding: Finding,
    /// Of a sampling strategy (`explore --strategy random|pct`): the executions that showed it, and the executions
    /// run. The text then says "in 50 of 50 sampled executions" rather than "in some executions" (sampling cannot
    /// show that a problem is in every execution, but it should not hide that every sample had it).
    pub sampled: Option<(u64, u64)>,
}

impl Report {
    /// What the search concluded, which decides the exit status: a problem found (1), else inconclusive when a
    /// limit stopped the search before it could decide (3), else no problem possible (0).
    pub fn verdict(&self) -> crate::cli::Verdict {
        crate::cli::Verdict::of_search(!self.findings.is_empty(), self.limit_hit.is_some())
    }

    /// The report as text.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let head = match self.verdict.as_str() {
            "ok" => "no deadlock, data race or undefined behaviour in any execution".to_string(),
            // A budget stopped the search, or it sampled or bounded the executions by design (`explore`): the line
            // below the counts says which. ("before a limit stopped the search" was printed for a sampling run that
            // had simply run its executions; the second new-user trial of 2026-12-03.)
            "inconclusive" => "inconclusive: no problem found in the executions explored, which are not all of them".to_string(),
            _ => {
                // "2 data races (in every execution), 1 deadlock (in some executions)"
                let mut groups: Vec<(String, String, usize)> = vec![];
                for f in &self.findings {
                    match groups.iter_mut().find(|g| g.0 == f.kind && g.1 == f.frequency_words()) {
                        Some(g) => g.2 += 1,
                        None => groups.push((f.kind.clone(), f.frequency_words(), 1)),
                    }
                }
                let parts: Vec<String> = groups
                    .iter()
                    .map(|(k, w, n)| if *n == 1 {
                        format!("{k} ({w})")
                    } else if k == "undefined" {
                        format!("{n} undefined behaviours ({w})")
                    } else {
                        format!("{n} {k}s ({w})")
                    })
                    .collect();
                parts.join(", ")
            }
        };
        s.push_str(&format!("{}: {head}\n", self.program));
        let starved = if self.starved_states > 0 {
            format!("; {} stuck if the platform withholds what it may (S1 overlap, N2 eager buffering)", self.starved_states)
        } else {
            String::new()
        };
        let explored = match self.sampled_executions {
            Some(n) => format!("took {} in {}", cuorder_model::describe::count(self.states as u64, "step"), cuorder_model::describe::count(n, "execution")),
            None => format!("explored {}", cuorder_model::describe::count(self.states as u64, "state")),
        };
        s.push_str(&format!(
            "  profile {}; {explored}, {} final, {} of them complete{starved}\n",
            self.profile, self.final_states, self.completed_final_states
        ));
        if let Some(l) = &self.limit_hit {
            s.push_str(&format!("  {l}\n"));
        }
        for (i, f) in self.findings.iter().enumerate() {
            s.push_str(&format!("\n{}. {} ({}):\n", i + 1, f.kind, f.frequency_words()));
            for line in f.text.lines() {
                s.push_str(&format!("   {line}\n"));
            }
        }
        s
    }
}

impl RenderedFinding {
    fn frequency_words(&self) -> String {
        match self.sampled {
            Some((_, 1)) => "in the 1 sampled execution".to_string(),
            Some((h, n)) if h == n => format!("in all {n} sampled executions"),
            Some((h, n)) => format!("in {h} of {n} sampled executions"),
            None if self.frequency == "always" => "in every execution".to_string(),
            None => "in some executions".to_string(),
        }
    }
}

/// Explores `program` under `profile` and builds the report.
pub fn check(program: &Program, profile: &Profile, limits: &Limits) -> Report {
    let sem = Semantics::new(program, profile);
    let ex = explore(&sem, limits);
    build_report(&sem, &ex)
}

/// Builds the report of an exploration made by any strategy.
pub fn build_report(sem: &Semantics, ex: &Exploration) -> Report {
    let findings: Vec<RenderedFinding> = ex
        .findings
        .iter()
        .enumerate()
        .map(|(i, f)| RenderedFinding {
            kind: f.problem.kind_name().to_string(),
            frequency: match f.frequency {
                Frequency::Always => "always".into(),
                Frequency::Sometimes => "sometimes".into(),
            },
            text: explain(sem, f, i + 1, sem.profile.argument()),
            finding: f.clone(),
            sampled: None,
        })
        .collect();
    let verdict = if let Some(f) = findings.first() {
        f.kind.clone()
    } else if ex.limit_hit.is_some() {
        "inconclusive".into()
    } else {
        "ok".into()
    };
    Report {
        program: sem.program.name.clone(),
        profile: sem.profile.label(),
        verdict,
        states: ex.states,
        final_states: ex.terminal_states,
        completed_final_states: ex.completed_states,
        starved_states: ex.starved_states,
        limit_hit: ex.limit_hit.clone(),
        findings,
        sampled_executions: None,
    }
}

/// The text of one finding; `number` is its 1-based position in the report (what `run --witness` takes), `profile`
/// the `--profile` argument that selects its profile again ([`Profile::argument`]: a file as given, or a built-in's
/// name; left out of the witness hint for `portable`, the default).
pub fn explain(sem: &Semantics, f: &Finding, number: usize, profile: &str) -> String {
    let mut s = String::new();
    match &f.problem {
        Problem::Deadlock(d) => {
            if d.starvation && d.cycle.iter().any(|e| e.reason == Reason::Starved) {
                s.push_str(
                    "the device may keep every remaining item from starting while an NCCL kernel spins \
                     (S1: streams are not guaranteed to progress independently)\n",
                );
            } else if d.starvation {
                s.push_str("NCCL may refuse to buffer a send beyond its guaranteed eager window: the send then waits for its recv (N2)\n");
            }
            if d.cycle.iter().any(|e| e.reason == Reason::EarlierPlan) {
                s.push_str(
                    "NCCL cuts a large group into kernel plans that run one after another, in its schedule order: a call \
                     of a later plan waits for every call of the earlier ones (N14)\n",
                );
            }
            s.push_str(&crate::timeline::stuck_lines(d, "", ""));
            for fix in fixes(d) {
                s.push_str(&format!("fix: {fix}\n"));
            }
            if sem.profile.eager_bytes_per_connection == 0 && !d.starvation && mentions_rendezvous(d) {
                s.push_str(
                    "note: under this profile every send ends only with its recv (rendezvous); NCCL may complete small \
                     sends eagerly, so this may complete for messages within an eager window (try --profile portable)\n",
                );
            }
        }
        Problem::DataRace(r) => s.push_str(&explain_race(sem, r, &f.witness)),
        Problem::Timeout(to) => {
            let comms: Vec<&str> = to.comms.iter().map(|c| sem.comm_name(*c)).collect();
            s.push_str(&format!(
                "hang turned into abort after timeout: the watchdog of r{} found work on {} unfinished after {} and \
                 aborted {} (N9, N13); without the watchdog this is a deadlock\n",
                to.rank,
                comms.join(", "),
                cuorder_model::describe::duration_ns(to.timeout_ns),
                if comms.len() == 1 { "it" } else { "them" }
            ));
            let d = &to.stuck;
            s.push_str(&crate::timeline::stuck_lines(d, "", " when it fired"));
            for fix in fixes(d) {
                s.push_str(&format!("fix: {fix}
"));
            }
        }
        Problem::StaleRead(r) => {
            let place = |l: OpLoc| {
                let (rank, t) = sem.thread_of[l.thread as usize];
                format!("{}{}", sem.op_label(l), sem.program.op_where(rank, t, l.op))
            };
            match r.other_send {
                Some(send) => s.push_str(&format!(
                    "the read does not see the value it expects (V1):\n  {}\n  expects what {} received from the \
                     send it names\n  but that recv matched {} (the n-th send from its peer on the communicator \
                     matches the n-th recv, N3), which reads another buffer\n",
                    place(r.check),
                    place(r.writer),
                    place(send)
                )),
                None => s.push_str(&format!(
                    "the read does not see the value it expects (V1):\n  {}\n  expects what {} wrote\n\
                     that write does not happen before the read: it runs after the read in stream order, or nothing \
                     (stream order, event wait, synchronize, message) orders it before the read\n",
                    place(r.check),
                    place(r.writer)
                )),
            }
        }
        Problem::Undefined(u) => {
            s.push_str(&format!("rule {} broken: {}\n", u.rule, u.message));
            for at in &u.at {
                let (r, t) = sem.thread_of[at.thread as usize];
                s.push_str(&format!("  at {}{}\n", sem.op_label(*at), sem.program.op_where(r, t, at.op)));
            }
        }
    }
    // A deadlock "in every execution" with a platform line: every execution hangs, this one (where its threads stop)
    // only on that platform (new-user trial of issue 30: "in every execution" beside "only in executions with"
    // read as a contradiction).
    let elsewhere = if f.frequency == Frequency::Always && matches!(f.problem, Problem::Deadlock(_)) {
        "; with the other choice the program hangs elsewhere"
    } else {
        ""
    };
    if let Some(c) = f.platform {
        s.push_str(&format!("platform: only in executions with {}{elsewhere} (N7)\n", c.words()));
    }
    if let Some(o) = f.plan_order {
        s.push_str(&format!("platform: only in executions with {}{elsewhere} (N14)\n", o.words()));
    }
    let prof = if profile == "portable" { String::new() } else { format!(" --profile {}", shell_word(profile)) };
    s.push_str(&format!(
        "witness: a schedule of {} step{} (`cuorder run PROGRAM --witness {number}{prof}` prints it)\n",
        f.witness.len(),
        if f.witness.len() == 1 { "" } else { "s" }
    ));
    s
}

/// `word` as one shell word: as it is when every character is one no shell treats specially, else in single quotes
/// (a profile file's path with a space in it).
fn shell_word(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=+,@%".contains(c)) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The standard fixes for the mechanisms a wait-for cycle goes through, keyed by the typed reasons of its edges.
fn fixes(d: &Stuck) -> Vec<&'static str> {
    let has = |p: &dyn Fn(Reason) -> bool| d.cycle.iter().any(|e| p(e.reason));
    let mut out = vec![];
    // A host call that blocks where the author did not expect it (a full launch queue, an implicit
    // synchronization, CUDA_LAUNCH_BLOCKING) is the cause when the cycle goes through one: its fix comes first, before
    // the general rules of the other edges (issue 30's note, item 5: the cudaFree example's first fix was about
    // collective order).
    if has(&|r| r == Reason::QueueFull) {
        out.push(
            "do not let the host depend on launching more work than the queue holds while NCCL work waits for another \
             host: reach the host rendezvous before launching the work, or synchronize the stream before the launches (S6)",
        );
    }
    if has(&|r| r == Reason::ImplicitSync) {
        out.push(
            "do not call cudaFree, cudaMalloc, cudaMallocHost, torch.cuda.empty_cache() or load a module lazily while NCCL \
             work waits for a host that this thread must reach: allocate and load before the exchange (a caching \
             allocator, CUDA_MODULE_LOADING=EAGER) and free after it has ended (S7)",
        );
    }
    if has(&|r| r == Reason::LaunchBlocking) {
        out.push("CUDA_LAUNCH_BLOCKING=1 makes every NCCL launch wait for its peers inside the call: do not use it with NCCL programs whose ranks launch at different times (S7)");
    }
    if has(&|r| matches!(r, Reason::Rendezvous { .. })) && has(&|r| r == Reason::StreamOrder) {
        out.push(
            "issue the send and the recv to the same peer in one group (ncclGroupStart/End: one launch whose parts \
             progress independently; N4), or order them by rank parity (even ranks send first, odd ranks receive \
             first) so that every send meets a recv that can run",
        );
    }
    if has(&|r| matches!(r, Reason::Connect { collective: true, .. })) {
        out.push(
            "every member must call each collective of a communicator, and every rank must call the collectives of \
             different communicators in the same order: a collective's first use on a communicator waits until every \
             member has called it, to set up its connections (N7)",
        );
    }
    if has(&|r| matches!(r, Reason::Connect { collective: false, .. })) {
        out.push(
            "make first contact mirrored: each pair of ranks must first meet in NCCL needing the same connection \
             directions on a communicator — group the send and the recv to a peer so both directions are set up \
             together, order them by rank parity, or set every connection up with one grouped warm-up exchange \
             before ops that wait for each other",
        );
    }
    if has(&|r| r == Reason::EarlierPlan) {
        out.push(
            "keep every group within one kernel plan: split a large group into several groups that each rank cuts the \
             same way (bounded by count and size, as Megatron-LM PR 7189 does), or make sure no call of the group \
             waits for work that a later call of the same group must let through (N14)",
        );
    }
    if has(&|r| r == Reason::CommSerialized) {
        out.push("put the ops that must progress together in one group (N4); one communicator runs its launches one after another even on different streams");
    }
    if has(&|r| r == Reason::Init) {
        out.push("every member must call comm_init on the communicator, and members must create communicators in the same order");
    }
    if has(&|r| r == Reason::Split) {
        out.push(
            "every member of the parent communicator must call comm_split on it, the same number of times and in the same \
             order, a rank that joins no new communicator (no color) included, before it waits for anything another \
             member does after its split; PyTorch 2.4's new_group splits on non-members at the call and on members at \
             their first collective on the group: issue that collective before anything that waits for the non-members \
             (later releases split every rank at the call) (N8)",
        );
    }
    if has(&|r| r == Reason::CollectiveMember) {
        out.push(
            "every member must issue a communicator's collectives in the same order, and no member may block on its part \
             before every member has issued it; when the cycle runs through several communicators, every rank must also \
             issue their collectives in the same order relative to each other (or put them on streams and host threads \
             that do not order them)",
        );
    }
    if d.cycle.iter().any(|e| e.reason == Reason::Unmatched && matches!(e.to, Node::Never(_))) {
        out.push("every send needs a matching recv on the same communicator (the n-th send from a to b matches the n-th recv on b from a; N3)");
    }
    if d.starvation && has(&|r| r == Reason::Starved) {
        out.push("do not rely on two streams running side by side: make the operations that wait for each other one NCCL group, or order them on one stream");
    }
    out
}

/// Whether ops `lo` < `hi` of `thread` were both issued inside one open NCCL group (N10: a record issued there is
/// enqueued before the group's kernels). A record issued before the group opened is simply earlier work (S3).
fn in_one_open_group(sem: &cuorder_model::semantics::Semantics, thread: cuorder_model::semantics::ThreadId, lo: u32, hi: u32) -> bool {
    use cuorder_model::program::OpKind;
    let mut depth = 0u32;
    for op in 0..=hi {
        if op >= lo && depth == 0 {
            return false;
        }
        match sem.op(cuorder_model::semantics::OpLoc { thread, op }).kind {
            OpKind::GroupStart => depth += 1,
            OpKind::GroupEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    true
}

fn mentions_rendezvous(d: &Stuck) -> bool {
    d.cycle.iter().any(|e| matches!(e.reason, Reason::Rendezvous { .. }))
}

fn access_line(sem: &Semantics, st: Option<&State>, a: &Access) -> String {
    let loc = a.who.loc();
    let (r, t) = sem.thread_of[loc.thread as usize];
    let verb = if a.write { "writes" } else { "reads" };
    let range = format!(
        "{} bytes {}..{}",
        sem.program.range_label(&a.range).split('[').next().unwrap_or(""),
        a.range.offset,
        a.range.offset + a.range.len
    );
    let on = match (a.who, st) {
        (Accessor::Item { item, .. }, Some(st)) => {
            let i = &st.streams.items[&item];
            let streams: Vec<String> = i.streams.iter().map(|s| sem.program.stream_label(*s, r)).collect();
            match &i.kind {
                ItemKind::Launch { ops, .. } if ops.len() > 1 => format!(" on stream {} (NCCL group ending at #{})", streams.join("+"), item.op),
                _ => format!(" on stream {}", streams.join("+")),
            }
        }
        (Accessor::Item { .. }, None) => String::new(),
        (Accessor::Host { .. }, _) => " on the host".into(),
    };
    format!("{}{} {verb} {range}{on}", sem.op_label(loc), sem.program.op_where(r, t, loc.op))
}

fn explain_race(sem: &Semantics, r: &Race, witness: &[cuorder_model::semantics::Step]) -> String {
    let st = replay_state(sem, witness).ok();
    let buf = sem.program.buffer(r.first.range.buf);
    let space = match buf.space {
        MemSpace::Device => "device memory",
        MemSpace::PinnedHost => "pinned host memory",
        MemSpace::PageableHost => "pageable host memory",
    };
    let mut s = format!("on r{} {} ({space}):\n", r.first.range.buf.rank, buf.name);
    if r.first.range.buf != r.second.range.buf {
        // The block belongs to the buffer whose allocation created it; the other buffer was handed it after a free.
        let creator = r.first.block.buf;
        let other = if r.first.range.buf == creator { r.second.range.buf } else { r.first.range.buf };
        s = format!(
            "on r{} memory shared by {} and {} (the caching allocator handed {}'s freed block to {}; P4):\n",
            creator.rank,
            sem.program.buffer(creator).name,
            sem.program.buffer(other).name,
            sem.program.buffer(creator).name,
            sem.program.buffer(other).name
        );
    }
    // Program order, so that the text does not depend on which access the explorer happened to run first.
    let (a, b) = if r.first.who.loc() <= r.second.who.loc() { (&r.first, &r.second) } else { (&r.second, &r.first) };
    s.push_str(&format!("  {}\n  {}\n", access_line(sem, st.as_ref(), a), access_line(sem, st.as_ref(), b)));
    s.push_str("nothing orders them: ");
    if r.first.end.is_none() || r.second.end.is_none() {
        s.push_str("one started while the other was still running, and ");
    }
    s.push_str(
        "neither one's end happens before the other's start (no stream order, event wait, synchronize or \
         message connects them)\n",
    );
    if let Some(st) = &st {
        for hint in hints(sem, st, r) {
            s.push_str(&format!("hint: {hint}\n"));
        }
    }
    s
}

/// Specific reasons a user probably expected an order that is not there (S3, N10), looking both ways: a wait
/// before one access on its stream that does not cover the other access.
fn hints(sem: &Semantics, st: &State, r: &Race) -> Vec<String> {
    let mut out = vec![];
    let (Accessor::Item { item: x, .. }, Accessor::Item { item: y, .. }) = (r.first.who, r.second.who) else {
        return out;
    };
    for (a, b) in [(x, y), (y, x)] {
        for h in wait_hints(sem, st, a, b) {
            if !out.contains(&h) {
                out.push(h);
            }
        }
    }
    out
}

/// Hints about the waits queued before item `b` on its stream(s) that a user may have meant to order `b` after `a`.
fn wait_hints(sem: &Semantics, st: &State, a: cuorder_model::semantics::ItemKey, b: cuorder_model::semantics::ItemKey) -> Vec<String> {
    let mut out = vec![];
    let (ia, ib) = (&st.streams.items[&a], &st.streams.items[&b]);
    let rank = ia.streams[0].rank;
    let a_streams: Vec<String> = ia.streams.iter().map(|s| sem.program.stream_label(*s, rank)).collect();
    // A wait issued before any record of its event enqueues nothing (S3): look for such waits on `b`'s stream among
    // the ops its own thread issued before it.
    for sb in &ib.streams {
        for op in 0..b.op {
            let loc = cuorder_model::semantics::OpLoc { thread: b.thread, op };
            let unbound = matches!(sem.op(loc).kind, cuorder_model::program::OpKind::StreamWaitEvent { stream, .. } if stream == *sb)
                && !st.streams.items.contains_key(&cuorder_model::semantics::ItemKey { thread: b.thread, op, sub: 0 });
            if unbound {
                let h = format!("{} was issued before any record of its event, so it orders nothing (S3)", sem.op_label(loc));
                if !out.contains(&h) {
                    out.push(h);
                }
            }
        }
    }
    for sb in &ib.streams {
        let (q, _) = &st.streams.queues[sem.stream_index(*sb)];
        let pos_b = q.iter().position(|k| *k == b).unwrap_or(q.len());
        for w in &q[..pos_b] {
            let wi = &st.streams.items[w];
            if wi.kind != ItemKind::WaitMarker {
                continue;
            }
            let Some(d) = wi.deps.first() else {
                out.push(format!("{} was issued before any record of its event, so it orders nothing (S3)", sem.op_label(w.loc())));
                continue;
            };
            if w.thread == a.thread && a.op > w.op {
                continue; // `a` was issued after the wait and its bound record: never meant to be covered by it
            }
            let rec = &st.streams.items[d];
            match ia.streams.iter().find(|sa| rec.streams.contains(sa)) {
                Some(sa) => {
                    let (qa, _) = &st.streams.queues[sem.stream_index(*sa)];
                    let (pd, pa) = (qa.iter().position(|k| k == d), qa.iter().position(|k| *k == a));
                    if let (Some(pd), Some(pa)) = (pd, pa) {
                        if pd < pa {
                            let in_group = matches!(ia.kind, ItemKind::Launch { .. })
                                && d.thread == a.thread
                                && in_one_open_group(sem, a.thread, d.op.min(a.op), d.op.max(a.op));
                            let why = if in_group {
                                "; it was called inside the open NCCL group, and stream operations inside a group are \
                                 enqueued at call time, before the group's kernels (N10)"
                            } else {
                                " (S3: a record captures only the work enqueued before it)"
                            };
                            out.push(format!(
                                "{} waits for {}, which was enqueued before {}{why}",
                                sem.op_label(w.loc()),
                                sem.op_label(d.loc()),
                                sem.op_label(a.loc())
                            ));
                        }
                    }
                }
                None => {
                    let rs: Vec<String> = rec.streams.iter().map(|s| sem.program.stream_label(*s, rank)).collect();
                    out.push(format!(
                        "{} is bound to {} on stream {}, not to work on stream {} (S3: a wait binds to the event's most \
                         recent record at the time of the wait call; a later or earlier record does not count)",
                        sem.op_label(w.loc()),
                        sem.op_label(d.loc()),
                        rs.join("+"),
                        a_streams.join("+")
                    ));
                }
            }
        }
    }
    out
}
