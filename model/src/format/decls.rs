//! The declarations of a program (ranks, streams, events, buffers, communicators, threads): checked, and turned into
//! the name tables that resolution uses.

use super::issues::{Issue, Issues};
use super::span_index::{field, index};
use super::surface::{Duration, SBuffer, SComm, SConfig, SInit, SOp, SProgram, SSpace, SStreamKind, SThread, Size};
use super::units::{parse_size, SIZE_HELP};
use super::{MAX_RANKS, MAX_THREADS_PER_RANK};
use crate::program::{Buffer, Comm, MemSpace, RankId, StreamKind};
use std::collections::BTreeMap;

/// Name of the legacy default stream (index 0 of every rank).
pub const LEGACY_STREAM: &str = "sL";
/// Name by which a thread refers to its own per-thread default stream.
pub const PER_THREAD_STREAM: &str = "sPT";

/// The checked declarations and their name tables. Names declared twice keep their first declaration.
pub struct Decls<'a> {
    /// Number of ranks, or 0 when the declared number is invalid (nothing per rank is then checked).
    pub ranks: u32,
    /// Declared streams, in order; IR index = position + 1.
    pub streams: Vec<(String, StreamKind)>,
    pub stream_idx: BTreeMap<String, u32>,
    pub events: Vec<String>,
    pub event_idx: BTreeMap<String, u32>,
    pub buffers: Vec<Buffer>,
    /// `false` for a buffer whose size could not be parsed (bounds are then not checked).
    pub buffer_size_known: Vec<bool>,
    pub buffer_idx: BTreeMap<String, u32>,
    pub comms: Vec<Comm>,
    pub comm_idx: BTreeMap<String, u32>,
    /// Every thread declaration.
    pub threads: Vec<ThreadDecl<'a>>,
    /// For every rank, the declarations of the threads it runs, in order (position = thread index in the IR).
    pub rank_threads: Vec<Vec<usize>>,
}

/// One `Thread` / `ThreadOn` declaration.
pub struct ThreadDecl<'a> {
    pub name: &'a str,
    pub ops: &'a [SOp],
    /// Path of the ops list (`threads[0].1`).
    pub ops_path: String,
}

/// Checks that `name` is usable as the name of a `what`; reports at `path` otherwise.
fn check_name(what: &str, name: &str, path: &str, issues: &mut Issues) -> bool {
    if name.is_empty() {
        issues.push(Issue::new(path, format!("empty {what} name")));
        false
    } else if name.contains('@') {
        issues.push(
            Issue::new(path, format!("{what} name `{name}` contains `@`"))
                .help("`@` is reserved for rank qualification (`\"s0@1\"` = stream s0 of rank 1)"),
        );
        false
    } else {
        true
    }
}

/// Adds `name` to `table` with value `value`, or reports a duplicate at `path` pointing at the first declaration.
fn declare(
    what: &str,
    table: &mut BTreeMap<String, u32>,
    first_paths: &mut BTreeMap<String, String>,
    name: &str,
    value: u32,
    path: &str,
    issues: &mut Issues,
) {
    if let Some(first) = first_paths.get(name) {
        issues.push(
            Issue::new(path, format!("duplicate {what} name `{name}`"))
                .related(first.clone(), "first declared here"),
        );
    } else {
        table.insert(name.to_string(), value);
        first_paths.insert(name.to_string(), path.to_string());
    }
}

/// Parses a size at `path`, reporting errors; `None` when invalid.
pub fn size(s: &Size, path: &str, issues: &mut Issues) -> Option<u64> {
    let r = match s {
        Size::Bytes(b) => Ok(*b),
        Size::Text(t) => parse_size(t),
        Size::Invalid(m) => Err(m.clone()),
    };
    r.map_err(|m| issues.push(Issue::new(path, m).help(SIZE_HELP))).ok()
}

/// Checks every declaration of `p`.
pub fn check<'a>(p: &'a SProgram, issues: &mut Issues) -> Decls<'a> {
    let ranks = if p.ranks == 0 || p.ranks > MAX_RANKS {
        issues.push(
            Issue::new("ranks", format!("a program has 1 to {MAX_RANKS} ranks, not {}", p.ranks))
                .help(format!("the limit is MAX_RANKS = {MAX_RANKS}")),
        );
        0
    } else {
        p.ranks
    };
    let mut d = Decls {
        ranks,
        streams: Vec::new(),
        stream_idx: BTreeMap::new(),
        events: Vec::new(),
        event_idx: BTreeMap::new(),
        buffers: Vec::new(),
        buffer_size_known: Vec::new(),
        buffer_idx: BTreeMap::new(),
        comms: Vec::new(),
        comm_idx: BTreeMap::new(),
        threads: Vec::new(),
        rank_threads: vec![Vec::new(); ranks as usize],
    };

    let mut first = BTreeMap::new();
    for (i, s) in p.streams.iter().enumerate() {
        let path = field(&index("streams", i), 0);
        let name = s.name.as_str();
        let kind = match s.kind {
            SStreamKind::Blocking => StreamKind::Blocking,
            SStreamKind::NonBlocking => StreamKind::NonBlocking,
        };
        d.streams.push((name.to_string(), kind));
        if !check_name("stream", name, &path, issues) {
            continue;
        }
        if name == LEGACY_STREAM || name == PER_THREAD_STREAM || name.starts_with("sPT.") {
            issues.push(
                Issue::new(&path, format!("stream name `{name}` is reserved"))
                    .help("`sL` is the legacy default stream and `sPT` the calling thread's per-thread default stream; both always exist"),
            );
            continue;
        }
        declare("stream", &mut d.stream_idx, &mut first, name, i as u32 + 1, &path, issues);
    }

    let mut first = BTreeMap::new();
    for (i, e) in p.events.iter().enumerate() {
        let path = index("events", i);
        d.events.push(e.clone());
        if check_name("event", e, &path, issues) {
            declare("event", &mut d.event_idx, &mut first, e, i as u32, &path, issues);
        }
    }

    let mut first = BTreeMap::new();
    for (i, b) in p.buffers.iter().enumerate() {
        let item = index("buffers", i);
        let (name, sz, space, pooled) = match b {
            SBuffer::Buffer { name, size, space } => (name, size, *space, false),
            SBuffer::Pooled { name, size } => (name, size, SSpace::Device, true),
        };
        let bytes = size(sz, &field(&item, 1), issues);
        if bytes == Some(0) {
            issues.push(Issue::new(field(&item, 1), format!("buffer `{name}` has size 0")));
        }
        let space = match space {
            SSpace::Device => MemSpace::Device,
            SSpace::PinnedHost => MemSpace::PinnedHost,
            SSpace::PageableHost => MemSpace::PageableHost,
        };
        d.buffers.push(Buffer { name: name.clone(), bytes: bytes.unwrap_or(u64::MAX), space, pooled });
        d.buffer_size_known.push(bytes.is_some());
        let path = field(&item, 0);
        if check_name("buffer", name, &path, issues) {
            declare("buffer", &mut d.buffer_idx, &mut first, name, i as u32, &path, issues);
        }
    }

    let mut first = BTreeMap::new();
    for (i, SComm { name, members, init, config, watchdog }) in p.comms.iter().enumerate() {
        let item = index("comms", i);
        let path = field(&item, 0);
        let members: Vec<RankId> = match members {
            None => (0..ranks).collect(),
            Some(list) => {
                if list.is_empty() {
                    issues.push(Issue::new(field(&item, 1), format!("communicator `{name}` has no members")));
                }
                let mut seen = Vec::new();
                for (j, &r) in list.iter().enumerate() {
                    let mpath = index(&field(&item, 1), j);
                    if ranks > 0 && r >= ranks {
                        issues.push(rank_out_of_range(&mpath, r, ranks));
                    } else if seen.contains(&r) {
                        issues.push(Issue::new(mpath, format!("rank {r} is listed twice in `{name}`")));
                    } else {
                        seen.push(r);
                    }
                }
                seen
            }
        };
        // N9: a watchdog's timeout, a positive duration.
        let watchdog_ns = match watchdog {
            None => None,
            Some(w) => {
                let path = field(&item, "watchdog");
                let r = match w {
                    Duration::Nanos(n) => Ok(*n),
                    Duration::Text(t) => super::units::parse_duration(t),
                    Duration::Invalid(m) => Err(m.clone()),
                };
                match r {
                    Ok(0) => {
                        issues.push(Issue::new(path, format!("the watchdog of `{name}` has a timeout of 0")).help("give a positive timeout, e.g. \"600 s\""));
                        None
                    }
                    Ok(n) => Some(n),
                    Err(m) => {
                        issues.push(Issue::new(path, m).help(super::units::DURATION_HELP));
                        None
                    }
                }
            }
        };
        d.comms.push(Comm {
            name: name.clone(),
            members,
            explicit_init: *init == SInit::Explicit,
            nonblocking: *config == SConfig::NonBlocking,
            watchdog_ns,
        });
        if check_name("communicator", name, &path, issues) {
            declare("communicator", &mut d.comm_idx, &mut first, name, i as u32, &path, issues);
        }
    }

    // Threads: which ranks run each, and unique names per rank.
    let mut first_on_rank: Vec<BTreeMap<&str, String>> = vec![BTreeMap::new(); ranks as usize];
    for (i, t) in p.threads.iter().enumerate() {
        let item = index("threads", i);
        let SThread { name, ops, ranks: on } = t;
        let name_path = field(&item, 0);
        let ranks_path = field(&item, "ranks");
        let on_ranks: Vec<RankId> = match on {
            None => (0..ranks).collect(),
            Some(list) => {
                if list.is_empty() {
                    issues.push(Issue::new(&ranks_path, format!("thread `{name}` runs on no rank")));
                }
                let mut seen = Vec::new();
                for (j, &r) in list.iter().enumerate() {
                    let rpath = index(&ranks_path, j);
                    if ranks > 0 && r >= ranks {
                        issues.push(rank_out_of_range(&rpath, r, ranks));
                    } else if seen.contains(&r) {
                        issues.push(Issue::new(rpath, format!("rank {r} is listed twice")));
                    } else {
                        seen.push(r);
                    }
                }
                seen.retain(|&r| r < ranks);
                seen
            }
        };
        let name = name.as_str();
        if name.is_empty() {
            issues.push(Issue::new(&name_path, "empty thread name"));
        }
        let decl = d.threads.len();
        d.threads.push(ThreadDecl { name, ops, ops_path: field(&item, 1) });
        for r in on_ranks {
            if let Some(firstp) = first_on_rank[r as usize].get(name) {
                issues.push(
                    Issue::new(&name_path, format!("duplicate thread name `{name}` on rank {r}"))
                        .related(firstp.clone(), "first declared here"),
                );
                continue;
            }
            first_on_rank[r as usize].insert(name, name_path.clone());
            d.rank_threads[r as usize].push(decl);
        }
    }
    for (r, ts) in d.rank_threads.iter().enumerate() {
        if ts.len() > MAX_THREADS_PER_RANK {
            issues.push(
                Issue::new("threads", format!("rank {r} runs {} threads; the limit is {MAX_THREADS_PER_RANK}", ts.len()))
                    .help(format!("the limit is MAX_THREADS_PER_RANK = {MAX_THREADS_PER_RANK}")),
            );
        }
    }
    d
}

/// "rank r does not exist" at `path`.
pub fn rank_out_of_range(path: &str, r: RankId, ranks: u32) -> Issue {
    Issue::new(path, format!("rank {r} does not exist"))
        .help(format!("the program has {ranks} rank{}: 0 to {}", if ranks == 1 { "" } else { "s" }, ranks - 1))
}
