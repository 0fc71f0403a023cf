//! The RON surface format of programs: parsing (`ron` + serde), SPMD expansion, name resolution and validation with
//! precise diagnostics, producing the resolved [`Program`]. The format is documented in `docs/program-format.md`.
//!
//! Pipeline: the span index records where every value is written; positional arguments are desugared into named
//! fields (`desugar`); `ron` deserializes the result into the surface types (`recover`: an op that does not
//! deserialize is reported and skipped, and the text read again; syntax errors stop here, with ron's position mapped
//! back to the source); declarations are checked; every thread is expanded per rank
//! (`OnRanks`, `Parity`, `Repeat`, `Group`); every op is resolved and checked; then the checks that span several ops
//! run (groups, communicator init, point-to-point and collective matching). Every error is collected.

mod checks;
mod decls;
mod desugar;
pub mod diagnostic;
mod expand;
mod expr;
mod instantiate;
mod issues;
mod resolve;
mod recover;
mod ron_error;
mod span_index;
mod split;
mod torch;
mod surface;
mod units;

pub use diagnostic::{Diagnostic, Related};
pub use recover::MAX_SKIPPED_OPS;
pub use surface::{STorchInit as TorchInit, STorchVersion as TorchVersion};
pub use units::{parse_duration, parse_size};

use crate::program::{Op, Origin, Program, Rank, Stream, StreamKind, Thread};
use checks::ThreadOps;
use diagnostic::LineIndex;
use expand::{expand, Budget};
use issues::Issues;
use resolve::{Ctx, Resolver};
use span_index::SpanIndex;
use std::collections::BTreeMap;
use std::rc::Rc;

/// At most this many ranks in a program (raised from 64 for pipelines of 1024+ stages, issue 8).
pub const MAX_RANKS: u32 = 4096;
/// At most this many host threads per rank.
pub const MAX_THREADS_PER_RANK: usize = 64;
/// At most this many ops in the whole expanded program (all ranks and threads together). Raised from 1,000,000 so
/// that `cuorder gen pipeline --stages 1024 --microbatches 64` (1F1B: 1.94 M ops, GPipe: 1.97 M) loads; loading costs
/// about 2 KiB of memory per op today (1024 × 64 1F1B: 3.9 GB peak, 58 s, mostly the span index), so the limit also
/// bounds the loader's memory.
pub const MAX_EXPANDED_OPS: usize = 2_000_000;
/// "Did you mean" compares names of at most this many characters (longer names get no suggestion), so that one
/// comparison costs at most 64 × 64 steps.
pub const MAX_SUGGESTED_NAME_CHARS: usize = 64;
/// At most this count in one `Repeat(count, [...])`, checked before expanding (even an empty body).
pub const MAX_REPEAT_COUNT: u32 = MAX_EXPANDED_OPS as u32;
/// At most this many levels of nested brackets and parentheses in a program (and in the resolved form).
pub const MAX_NESTING_DEPTH: usize = 128;
/// Duration of a kernel that does not say, in ns.
pub const DEFAULT_KERNEL_NS: u64 = 10_000;

/// What loading may set from outside the program text: the PyTorch dialect's settings, which override what the
/// program's `torch: Torch(..)` says (so that one script can be checked on each PyTorch profile; `cuorder check
/// --torch-version/--torch-init/--torch-avoid-record-streams`). `None` keeps the program's value (or its default).
/// A program without PyTorch calls is unaffected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TorchOptions {
    /// Lower as this ProcessGroupNCCL version (P3).
    pub version: Option<TorchVersion>,
    /// Lower as this default-group initialisation (P2).
    pub init: Option<TorchInit>,
    /// `TORCH_NCCL_AVOID_RECORD_STREAMS` (P4).
    pub avoid_record_streams: Option<bool>,
}

impl TorchOptions {
    /// Whether nothing is overridden.
    pub fn is_empty(&self) -> bool {
        *self == TorchOptions::default()
    }
}

/// Parses, expands and validates the program `text`; `name` becomes [`Program::name`]. On failure, every error found
/// (an op that does not deserialize is reported and skipped, `recover.rs`; a syntax error stops reading, and
/// is reported with what was found before it), in source order.
pub fn load(name: &str, text: &str) -> Result<Program, Vec<Diagnostic>> {
    load_with(name, text, &TorchOptions::default())
}

/// [`load`] with the PyTorch dialect's settings overridden by `torch` (see [`TorchOptions`]).
pub fn load_with(name: &str, text: &str, torch: &TorchOptions) -> Result<Program, Vec<Diagnostic>> {
    // The light index places ops and desugars; every error path builds the full one for its diagnostics.
    let full_index = || {
        let mut index = SpanIndex::build(text);
        index.alias_positional(surface::POSITIONAL);
        index
    };
    let mut index = SpanIndex::build_light(text);
    // An op that does not read is reported and skipped (`recover.rs`): its errors come with the rest.
    let recover::Parsed { surface, diagnostics: skipped, holes } = recover::parse(text, &index)?;
    index.alias_positional(surface::POSITIONAL);
    let mut issues = Issues::default();
    let mut decls = decls::check(&surface, &mut issues);
    let torch_decls = torch::declare(&surface, torch, &mut decls, &mut issues);
    let ranks = decls.ranks;

    // How many ranks run the thread a path belongs to (to say "rank 1: ..." only when an error is rank-specific).
    let thread_ranks: Vec<u32> = (0..decls.threads.len())
        .map(|t| decls.rank_threads.iter().filter(|ts| ts.contains(&t)).count() as u32)
        .collect();
    let ranks_of_path = |path: &str| -> u32 {
        path.strip_prefix("threads[")
            .and_then(|rest| rest.split(']').next())
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| thread_ranks.get(i).copied())
            .unwrap_or(ranks)
    };

    let mut budget = Budget::new();
    let mut expanded = Vec::new();
    let mut pairs = std::collections::BTreeSet::new();
    let mut groups = BTreeMap::new();
    let mut group_streams = std::collections::BTreeSet::new();
    let mut work_events = std::collections::BTreeSet::new();
    let mut flats: BTreeMap<String, u64> = BTreeMap::new();
    let mut paths = expand::PathCache::default();
    let torch_names = torch::TorchNames::new(&decls);
    for r in 0..ranks {
        for (ti, &t) in decls.rank_threads[r as usize].iter().enumerate() {
            let decl = &decls.threads[t];
            let mut tcx = torch::TorchCx::new(&torch_decls, &torch_names, &decls);
            let items = expand(decl.ops, &decl.ops_path, r, ranks, &mut budget, &mut tcx, &mut issues, &mut paths);
            pairs.append(&mut tcx.pairs);
            groups.append(&mut tcx.lazy_groups);
            group_streams.append(&mut tcx.group_streams);
            work_events.append(&mut tcx.work_events);
            for (name, bytes) in std::mem::take(&mut tcx.flats) {
                let b = flats.entry(name).or_insert(0);
                *b = (*b).max(bytes);
            }
            expanded.push((r, ti as u32, decl.name, items));
        }
    }
    torch::declare_pairs(&pairs, &mut decls);
    torch::declare_groups(&groups, &mut decls);
    torch::declare_group_streams(&group_streams, &mut decls);
    torch::declare_work_events(&work_events, &mut decls);
    torch::declare_flats(&flats, &mut decls);
    // A skipped op that may have been a split leaves the splits' matching unknown: their errors are not reported.
    let skipped_may_split = holes.iter().any(|h| h.could_be("CommSplit"));
    let mut unreported = Issues::default();
    split::declare(&expanded, &mut decls, if skipped_may_split { &mut unreported } else { &mut issues });
    // N9: ProcessGroupNCCL's watchdog covers every communicator of the program's process groups.
    if let Some(ns) = torch_decls.watchdog_ns {
        for c in &mut decls.comms {
            c.watchdog_ns = Some(ns);
        }
    }
    let decls = decls;
    if budget.exhausted {
        return Err(with_skipped(skipped, issues.into_diagnostics(text, &full_index(), ranks_of_path)));
    }

    let mut resolver = Resolver::new(&decls, &index, &mut issues);
    resolver.skipped_may_split = skipped_may_split;
    let mut threads = Vec::with_capacity(expanded.len());
    for (rank, thread, name, items) in &expanded {
        let mut cx = Ctx { rank: *rank, thread: *thread, after_skip: false };
        let mut ops = Vec::with_capacity(items.len());
        let mut tainted = false;
        for item in items {
            // A skipped op (reported) could have been anything: what comes after it in this thread is resolved, and
            // checked alone; the checks that need the thread's whole sequence skip the thread.
            if matches!(item.leaf, expand::Leaf::Op(surface::SOp::Skipped)) {
                cx.after_skip = true;
                tainted = true;
                continue;
            }
            match resolver.op(&cx, item, &ops) {
                Some(kind) => ops.push((kind, item.path.clone())),
                None => tainted |= takes_part_in_matching(item),
            }
        }
        threads.push(ThreadOps { rank: *rank, thread: *thread, name, ops, tainted, incomplete: cx.after_skip });
    }
    let barriers = std::mem::take(&mut resolver.barriers);
    checks::check(&threads, &decls, &mut issues);
    if !issues.is_empty() || !skipped.is_empty() {
        return Err(with_skipped(skipped, issues.into_diagnostics(text, &full_index(), ranks_of_path)));
    }

    let lines = LineIndex::new(text);
    // Keyed by the path's allocation: expansion shares one `Rc` per written op (`PathCache`), so this finds an op's
    // origin without comparing long path strings (a million times for a 1,024-rank pipeline; issue 9). Two `Rc`s
    // holding equal text only resolve the same path twice.
    let mut origins: rustc_hash::FxHashMap<*const u8, Origin> = Default::default();
    let mut origin = |path: &Rc<str>| -> Origin {
        origins
            .entry(Rc::as_ptr(path) as *const u8)
            .or_insert_with(|| match index.resolve(path) {
                Some((_, node)) => {
                    let (line, column) = lines.line_col(node.span.start);
                    Origin { offset: Some(node.span.start), line: Some(line), column: Some(column) }
                }
                None => Origin::default(),
            })
            .clone()
    };
    let mut by_rank: Vec<Vec<Thread>> = (0..ranks).map(|_| Vec::new()).collect();
    for t in threads {
        let ops = t.ops.into_iter().map(|(kind, path)| Op { kind, origin: origin(&path) }).collect();
        by_rank[t.rank as usize].push(Thread { name: t.name.to_string(), ops });
    }
    let mut ranks: Vec<Rank> = by_rank
        .into_iter()
        .map(|threads| {
            let mut streams = vec![Stream { name: decls::LEGACY_STREAM.to_string(), kind: StreamKind::LegacyDefault }];
            streams.extend(decls.streams.iter().map(|(n, k)| Stream { name: n.clone(), kind: *k }));
            streams.extend(
                threads.iter().map(|t| Stream { name: format!("sPT.{}", t.name), kind: StreamKind::PerThreadDefault }),
            );
            Rank { streams, events: decls.events.clone(), buffers: decls.buffers.clone(), threads }
        })
        .collect();
    nccl_background_streams(&mut ranks, &decls.comms);
    let program = Program { name: name.to_string(), ranks, comms: decls.comms.clone(), barriers, uses_torch: torch_decls.used };
    // The same validation as every other way in: anything it finds here is a gap in the checks above, reported at
    // the op rather than left for the semantics to trip over.
    program.validate().map_err(|errs| {
        errs.errors
            .iter()
            .map(|e| Diagnostic::at(text, e.origin.offset.unwrap_or(0), 0, e.to_string()))
            .collect::<Vec<_>>()
    })?;
    Ok(program)
}

/// N12, S2: NCCL operations that a thread issues on its own per-thread default stream (`sPT`) through a non-blocking
/// communicator are moved to a per-thread default stream of NCCL's background thread, one per launching call (an
/// outermost group end, or an ungrouped call), named `sPT.<thread>#nccl<k>` and appended to the rank's streams.
///
/// Why: NCCL (2.28.9 and 2.30, `src/group.cc` `ncclGroupEndInternal`) runs a non-blocking group's launch on a new
/// thread (`pthread_create` of `ncclAsyncJobMain` with `groupLaunchNonBlocking`), and `src/enqueue.cc` keeps the
/// `cudaStream_t` the user passed (`l->stream = info->stream`) and launches on it from there (`launchStream =
/// planner->streams->stream`, `cuLaunchKernelEx`), translating no handle. `cudaStreamPerThread` means the per-thread
/// default stream of the *calling* thread (CUDA Runtime API, "Stream synchronization behavior"), so the work lands
/// on the background thread's per-thread stream: a blocking stream that synchronizes with the legacy stream `sL`,
/// but not with the user's `sPT` (per-thread streams of different threads do not synchronize), and a new thread per
/// group end, so a stream per launching call. NCCL work of a blocking communicator, launched by the calling thread,
/// stays on its `sPT`.
fn nccl_background_streams(ranks: &mut [Rank], comms: &[crate::program::Comm]) {
    use crate::program::OpKind;
    for rank in ranks.iter_mut() {
        let base = rank.streams.len();
        let own_base = base - rank.threads.len();
        let mut added: Vec<Stream> = vec![];
        for (ti, thread) in rank.threads.iter_mut().enumerate() {
            let own = (own_base + ti) as u32;
            let (mut depth, mut current, mut k) = (0u32, None::<u32>, 0u32);
            for op in &mut thread.ops {
                match &mut op.kind {
                    OpKind::GroupStart => depth += 1,
                    OpKind::GroupEnd => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            current = None;
                        }
                    }
                    OpKind::Send { comm, stream, .. } | OpKind::Recv { comm, stream, .. } | OpKind::Collective { comm, stream, .. }
                        if stream.index == own && comms.get(comm.0 as usize).is_some_and(|c| c.nonblocking) =>
                    {
                        let index = match current {
                            Some(i) => i,
                            None => {
                                let i = (base + added.len()) as u32;
                                added.push(Stream { name: format!("sPT.{}#nccl{k}", thread.name), kind: StreamKind::PerThreadDefault });
                                k += 1;
                                if depth > 0 {
                                    current = Some(i);
                                }
                                i
                            }
                        };
                        stream.index = index;
                    }
                    _ => {}
                }
            }
        }
        rank.streams.extend(added);
    }
}

/// `skipped` (the errors of the ops the reader skipped, `recover.rs`) and `more`, in source order.
fn with_skipped(skipped: Vec<Diagnostic>, more: Vec<Diagnostic>) -> Vec<Diagnostic> {
    let mut all = skipped;
    all.extend(more);
    all.sort_by(|a, b| (a.offset, &a.message).cmp(&(b.offset, &b.message)));
    all
}

/// Whether `item` is an NCCL send, recv or collective: when one fails to resolve, the positional matching of its
/// thread's NCCL operations is no longer known, so the matching checks skip that thread.
fn takes_part_in_matching(item: &expand::Item) -> bool {
    use surface::SOp::*;
    let op = match &item.leaf {
        expand::Leaf::Op(op) => *op,
        expand::Leaf::Owned(op) => op,
        expand::Leaf::GroupStart | expand::Leaf::GroupEnd => return false,
    };
    matches!(
        op,
        Send { .. }
            | Recv { .. }
            | AllReduce { .. }
            | Broadcast { .. }
            | AllGather { .. }
            | ReduceScatter { .. }
            | AllToAll { .. }
            | Reduce { .. }
            | Gather { .. }
            | Scatter { .. }
            | CommSplit { .. }
    )
}

#[cfg(test)]
mod tests;
