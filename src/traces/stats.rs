//! Statistics of a batch of packed runs (`cuorder conform --dir DIR --stats`): the table of hardware outcome ×
//! model verdict, how many of the data races the model reports were *seen* on the hardware (both accesses' device
//! work running at the same time), and the runs where a pooled buffer's read saw another pooled buffer's write (the
//! caching allocator reused the block, P4).

use std::collections::BTreeMap;
use std::path::Path;

use cuorder_model::observation::{Observation, OpId, Outcome, Seen, Version};
use cuorder_model::program::{OpKind, Program};
use cuorder_model::semantics::{OpLoc, Semantics};
use cuorder_model::verdict::Problem;
use cuorder_sim::explore::{explore, Limits};

use super::packed;
use crate::LoadError;

fn op_id(sem: &Semantics, l: OpLoc) -> OpId {
    let (rank, thread) = sem.thread_of[l.thread as usize];
    OpId { rank, thread, index: l.op }
}

/// Counts of one batch.
#[derive(Debug, Default)]
pub struct Stats {
    /// (hardware outcome, model verdict) -> runs.
    pub table: BTreeMap<(String, String), usize>,
    /// Race pairs (distinct per run) whose two ops both have device times.
    pub races_timed: usize,
    /// ... of which the two ops' device work overlapped in time.
    pub races_seen: usize,
    /// Race pairs where one side has no device times (host access, or work on the legacy stream).
    pub races_untimed: usize,
    /// Runs with at least one race pair seen.
    pub runs_with_race_seen: usize,
    /// Runs the model reports a race in.
    pub runs_with_race: usize,
    /// Runs where a read of a pooled buffer saw a write to another pooled buffer: (run, read op, writer).
    pub reuse_seen: Vec<(String, OpId, OpId)>,
    /// Per (program, race pair) over all its runs: (timed in some run, seen overlapping in some run).
    pub pairs: BTreeMap<(String, OpId, OpId), (bool, bool)>,
}

fn overlap(o: &Observation, a: OpId, b: OpId) -> Option<bool> {
    let span = |x: OpId| o.ops.iter().find(|op| op.op == x).and_then(|op| op.device).and_then(|d| Some((d.start_ns?, d.end_ns?)));
    let (sa, sb) = (span(a)?, span(b)?);
    Some(sa.0 < sb.1 && sb.0 < sa.1)
}

fn pooled_written_by(p: &Program, w: OpId) -> Option<u32> {
    let op = p.ranks.get(w.rank as usize)?.threads.get(w.thread as usize)?.ops.get(w.index as usize)?;
    match &op.kind {
        OpKind::Kernel { writes, .. } => writes.iter().find(|r| p.buffer(r.buf).pooled).map(|r| r.buf.index),
        OpKind::Memset { dst, .. } if p.buffer(dst.buf).pooled => Some(dst.buf.index),
        _ => None,
    }
}

/// Computes [`Stats`] over every packed run under `dir`'s manifests, under each manifest's profile.
///
/// Errors: as [`super::check_folder`].
pub fn batch_stats(dir: &Path) -> Result<Stats, LoadError> {
    let mut st = Stats::default();
    for m in super::manifests(dir) {
        let folder = m.parent().unwrap_or(Path::new("."));
        // Read and resolved as `conform --dir` does: a profile file relative to the manifest's folder or a folder
        // above it (it was resolved relative to the working folder: exit 2 outside the repository root).
        let man = super::load_manifest(&m)?;
        let (profile, _) = super::manifest_profile(&man, folder)?;
        for file in packed::pack_files(folder) {
            for (name, p, o) in packed::load_runs(folder, &file)? {
                let sem = Semantics::new(&p, &profile);
                let ex = explore(&sem, &Limits::default());
                let mut kinds: Vec<&str> = ex.findings.iter().map(|f| f.problem.kind_name()).collect();
                kinds.sort();
                kinds.dedup();
                let verdict = if kinds.is_empty() { "no problem".to_string() } else { kinds.join(" + ") };
                let outcome = match o.outcome {
                    Outcome::Completed => "completed",
                    Outcome::Hung { .. } => "hung",
                    Outcome::Failed { .. } => "failed",
                };
                *st.table.entry((outcome.to_string(), verdict)).or_default() += 1;
                let mut seen_here = false;
                let mut any_race = false;
                let mut pairs = std::collections::BTreeSet::new();
                for f in &ex.findings {
                    if let Problem::DataRace(r) = &f.problem {
                        let (a, b) = (op_id(&sem, r.first.who.loc()), op_id(&sem, r.second.who.loc()));
                        if !pairs.insert((a.min(b), a.max(b))) {
                            continue;
                        }
                        any_race = true;
                        let ov = overlap(&o, a, b);
                        let e = st.pairs.entry((name.clone(), a.min(b), a.max(b))).or_default();
                        e.0 |= ov.is_some();
                        e.1 |= ov == Some(true);
                        match ov {
                            Some(true) => {
                                st.races_timed += 1;
                                st.races_seen += 1;
                                seen_here = true;
                            }
                            Some(false) => st.races_timed += 1,
                            None => st.races_untimed += 1,
                        }
                    }
                }
                st.runs_with_race += usize::from(any_race);
                st.runs_with_race_seen += usize::from(seen_here);
                for r in &o.reads {
                    if !p.buffer(r.range.buf).pooled {
                        continue;
                    }
                    let vs: Vec<Version> = match &r.seen {
                        Seen::Uniform(v) => vec![*v],
                        Seen::Mixed { first, last, min, max } => vec![*first, *last, *min, *max],
                        _ => vec![],
                    };
                    for v in vs {
                        if let Version::Op(w) = v {
                            if pooled_written_by(&p, w).is_some_and(|b| b != r.range.buf.index) {
                                st.reuse_seen.push((name.clone(), r.op, w));
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(st)
}

impl Stats {
    /// The statistics as text (a markdown table and lines).
    pub fn to_text(&self) -> String {
        let mut s = String::from("| hardware outcome | model verdict | runs |\n|---|---|---|\n");
        for ((o, v), n) in &self.table {
            s.push_str(&format!("| {o} | {v} | {n} |\n"));
        }
        let pct = |a: usize, b: usize| if b == 0 { 0.0 } else { 100.0 * a as f64 / b as f64 };
        s.push_str(&format!(
            "race pairs reported by the model: {} ({} with device times on both sides, {} involving a host access or \
             untimed legacy-stream work)\n",
            self.races_timed + self.races_untimed,
            self.races_timed,
            self.races_untimed
        ));
        s.push_str(&format!(
            "seen unordered on the hardware (the two ops' device work overlapped): {} of {} timed pairs ({:.1}%)\n",
            self.races_seen,
            self.races_timed,
            pct(self.races_seen, self.races_timed)
        ));
        s.push_str(&format!(
            "runs with a race: {}; with at least one race pair seen overlapping: {} ({:.1}%)\n",
            self.runs_with_race,
            self.runs_with_race_seen,
            pct(self.runs_with_race_seen, self.runs_with_race)
        ));
        let distinct = self.pairs.len();
        let timed = self.pairs.values().filter(|v| v.0).count();
        let seen = self.pairs.values().filter(|v| v.1).count();
        s.push_str(&format!(
            "distinct race pairs (program, op pair) over all runs: {distinct}; timed in some run: {timed}; seen \
             overlapping in at least one run: {seen} ({:.1}% of timed)\n",
            pct(seen, timed)
        ));
        s.push_str(&format!("reads of a pooled buffer that saw another pooled buffer's write (block reused, P4): {}\n", self.reuse_seen.len()));
        for (run, r, w) in self.reuse_seen.iter().take(10) {
            s.push_str(&format!("  {run}: read by {r} saw the write of {w}\n"));
        }
        s
    }
}
