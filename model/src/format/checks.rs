//! The checks that look at several ops at once, after resolution: balanced groups, communicator initialization,
//! static point-to-point matching (positional, per communicator and direction) and collective agreement.

use super::decls::Decls;
use super::issues::{Issue, Issues};
use crate::program::{CollectiveKind, CommId, OpKind, RankId};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// The resolved ops of one thread of one rank, each with the path of the op it comes from.
pub struct ThreadOps<'a> {
    pub rank: RankId,
    /// Index of the thread within its rank.
    pub thread: u32,
    pub name: &'a str,
    pub ops: Vec<(OpKind, Rc<str>)>,
    /// An NCCL send, recv or collective of this thread failed to resolve: matching checks skip what this thread takes
    /// part in.
    pub tainted: bool,
    /// An op of this thread was skipped (`recover.rs`; the load fails, and the thread is tainted too): it may have been
    /// a GroupStart, a GroupEnd or a CommInit, so the checks of group balance and of use before CommInit skip it.
    pub incomplete: bool,
}

fn bytes(n: u64) -> String {
    if n == 1 {
        "1 byte".to_string()
    } else {
        format!("{n} bytes")
    }
}

/// Runs every cross-op check.
pub fn check(threads: &[ThreadOps], d: &Decls, issues: &mut Issues) {
    for t in threads.iter().filter(|t| !t.incomplete) {
        groups(t, issues);
    }
    comm_init(threads, d, issues);
    p2p(threads, issues);
    collectives(threads, d, issues);
}

/// Every GroupEnd closes a GroupStart of the same thread, and no thread ends inside a group.
fn groups(t: &ThreadOps, issues: &mut Issues) {
    let mut open: Vec<&Rc<str>> = Vec::new();
    for (op, path) in &t.ops {
        match op {
            OpKind::GroupStart => open.push(path),
            OpKind::GroupEnd if open.pop().is_none() => {
                issues.push(
                    Issue::new(&**path, "GroupEnd without a matching GroupStart")
                        .help("every GroupEnd closes an earlier GroupStart of the same thread; Group([...]) writes both")
                        .on_rank(t.rank),
                );
            }
            _ => {}
        }
    }
    for path in open {
        issues.push(
            Issue::new(&**path, format!("GroupStart is never closed: thread `{}` ends with this group open", t.name))
                .help("add a GroupEnd, or write the group as Group([...])")
                .on_rank(t.rank),
        );
    }
}

/// CommInit only of Explicit communicators, once per rank; an Explicit communicator used only after the calling
/// thread's CommInit.
fn comm_init(threads: &[ThreadOps], d: &Decls, issues: &mut Issues) {
    let mut first: BTreeMap<(CommId, RankId), Rc<str>> = BTreeMap::new();
    for t in threads {
        let mut have: BTreeSet<(CommId, RankId)> = BTreeSet::new();
        for (op, path) in &t.ops {
            let used = match op {
                OpKind::CommInit { comm } => {
                    let c = &d.comms[comm.0 as usize];
                    if !c.explicit_init {
                        issues.push(
                            Issue::new(&**path, format!("CommInit of `{}`, which is Implicit (it exists before the program starts)", c.name))
                                .help(format!(
                                    "declare it `Comm(\"{}\", [members], Explicit)` to create it with CommInit, or remove this CommInit",
                                    c.name
                                ))
                                .on_rank(t.rank),
                        );
                    } else if let Some(f) = first.get(&(*comm, t.rank)) {
                        issues.push(
                            Issue::new(&**path, format!("`{}` is initialized twice on this rank", c.name))
                                .related(&**f, "first CommInit")
                                .on_rank(t.rank),
                        );
                    } else {
                        first.insert((*comm, t.rank), path.clone());
                    }
                    have.insert((*comm, t.rank));
                    None
                }
                // N8: the communicator a split creates exists on this rank after it; the parent must be usable.
                OpKind::CommSplit { parent, comm, .. } => {
                    if let Some(c) = comm {
                        have.insert((*c, t.rank));
                    }
                    Some((*parent, t.rank))
                }
                OpKind::Send { comm, stream, .. }
                | OpKind::Recv { comm, stream, .. }
                | OpKind::Collective { comm, stream, .. } => Some((*comm, stream.rank)),
                // N12, N13: poll, finalize and destroy use this thread's communicator; an abort may come from any
                // thread of the rank (a watchdog thread).
                OpKind::CommPoll { comm } | OpKind::CommFinalize { comm } | OpKind::CommDestroy { comm } => Some((*comm, t.rank)),
                _ => None,
            };
            if let Some((comm, rank)) = used {
                let c = &d.comms[comm.0 as usize];
                if c.explicit_init && !have.contains(&(comm, rank)) && !t.incomplete {
                    issues.push(
                        Issue::new(&**path, format!("`{}` is used before this thread's CommInit(\"{}\")", c.name, c.name))
                            .help(format!("an Explicit communicator exists only after CommInit: call CommInit(\"{}\") earlier in this thread", c.name))
                            .on_rank(t.rank),
                    );
                }
            }
        }
    }
}

/// One NCCL operation seen by the matching checks.
struct Seen<'p> {
    thread: (RankId, u32),
    tainted: bool,
    path: &'p Rc<str>,
}

/// `true` when every entry comes from one untainted thread, so their order is known statically.
fn static_order(list: &[(Seen, u64)]) -> bool {
    list.iter().all(|(s, _)| !s.tainted && s.thread == list[0].0.thread)
}

/// The n-th Send src→dst on a communicator matches the n-th Recv on dst from src: their sizes must agree.
fn p2p(threads: &[ThreadOps], issues: &mut Issues) {
    type Key = (CommId, RankId, RankId);
    let mut sends: BTreeMap<Key, Vec<(Seen, u64)>> = BTreeMap::new();
    let mut recvs: BTreeMap<Key, Vec<(Seen, u64)>> = BTreeMap::new();
    for t in threads {
        for (op, path) in &t.ops {
            let seen = Seen { thread: (t.rank, t.thread), tainted: t.tainted, path };
            match op {
                OpKind::Send { comm, peer, buf, stream } => {
                    sends.entry((*comm, stream.rank, *peer)).or_default().push((seen, buf.len))
                }
                OpKind::Recv { comm, peer, buf, stream } => {
                    recvs.entry((*comm, *peer, stream.rank)).or_default().push((seen, buf.len))
                }
                _ => {}
            }
        }
    }
    for (key, ss) in &sends {
        let Some(rs) = recvs.get(key) else { continue };
        if !static_order(ss) || !static_order(rs) {
            continue;
        }
        for ((s, slen), (r, rlen)) in ss.iter().zip(rs) {
            if slen != rlen {
                issues.push(
                    Issue::new(&**r.path, format!("this Recv of {} matches a Send of {}", bytes(*rlen), bytes(*slen)))
                        .help("the n-th Send from a rank to a peer matches the peer's n-th Recv from that rank on the same communicator; their sizes must be equal (a larger Recv waits forever)")
                        .related(&**s.path, format!("the matching Send ({})", bytes(*slen)))
                        .on_rank(key.2),
                );
            }
        }
    }
}

/// What the members of a communicator must agree on for one collective.
#[derive(PartialEq, Eq)]
struct Signature {
    kind: &'static str,
    count: u64,
    root: Option<RankId>,
}

impl Signature {
    fn of(kind: CollectiveKind, send: u64, recv: u64) -> Signature {
        Signature { kind: kind.name(), count: kind.agreed_bytes(send, recv), root: kind.root() }
    }

    fn describe(&self) -> String {
        match (self.kind, self.root) {
            (k, Some(root)) => format!("{k} of {} from rank {root}", bytes(self.count)),
            (k @ ("AllGather" | "ReduceScatter"), None) => format!("{k} of {} per rank", bytes(self.count)),
            (k, None) => format!("{k} of {}", bytes(self.count)),
        }
    }
}

/// The most collective mismatches reported per member and communicator.
const MAX_MISMATCHES_SHOWN: usize = 8;

/// The n-th collective on a communicator has the same kind, size and root on every member.
fn collectives(threads: &[ThreadOps], d: &Decls, issues: &mut Issues) {
    let mut per: BTreeMap<(CommId, RankId), Vec<(Seen, Signature)>> = BTreeMap::new();
    for t in threads {
        for (op, path) in &t.ops {
            if let OpKind::Collective { comm, kind, send, recv, stream } = op {
                let seen = Seen { thread: (t.rank, t.thread), tainted: t.tainted, path };
                per.entry((*comm, stream.rank)).or_default().push((seen, Signature::of(*kind, send.len, recv.len)));
            }
        }
    }
    for (ci, c) in d.comms.iter().enumerate() {
        let comm = CommId(ci as u32);
        let lists: Vec<(RankId, &Vec<(Seen, Signature)>)> = c
            .members
            .iter()
            .filter_map(|&m| per.get(&(comm, m)).map(|l| (m, l)))
            .filter(|(_, l)| l.iter().all(|(s, _)| !s.tainted && s.thread == l[0].0.thread))
            .collect();
        let Some(&(ref_rank, reference)) = lists.first() else { continue };
        for &(m, list) in &lists[1..] {
            // Every mismatching position, so that independent mistakes show at once; but a collective one member
            // has more or fewer than the reference shifts every later position: that is reported once.
            let same = |a: &[(Seen, Signature)], b: &[(Seen, Signature)]| a.iter().zip(b).all(|((_, x), (_, y))| x == y);
            let mut shown = 0;
            for (k, ((s, sig), (rs, rsig))) in list.iter().zip(reference).enumerate() {
                if sig == rsig {
                    continue;
                }
                let extra = list.len() > reference.len() && same(&list[k + 1..], &reference[k..]);
                let missing = list.len() < reference.len() && same(&list[k..], &reference[k + 1..]);
                let help = if extra {
                    format!("this rank calls one collective more on `{}` than rank {ref_rank}, here: every later one is off by one", c.name)
                } else if missing {
                    format!("this rank lacks rank {ref_rank}'s {} here: every later collective on `{}` is off by one", rsig.describe(), c.name)
                } else {
                    "the n-th collective on a communicator must have the same kind, size and root on every member".to_string()
                };
                issues.push(
                    Issue::new(
                        &**s.path,
                        format!("this {} does not match rank {ref_rank}'s {} on `{}`", sig.describe(), rsig.describe(), c.name),
                    )
                    .help(help)
                    .related(&**rs.path, format!("rank {ref_rank}'s collective at the same position"))
                    .on_rank(m),
                );
                shown += 1;
                if extra || missing || shown == MAX_MISMATCHES_SHOWN {
                    break;
                }
            }
        }
    }
}
