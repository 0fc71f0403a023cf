//! `CommSplit` (N8): after every thread has been expanded, the communicators the program's `ncclCommSplit` calls
//! create are declared from what the members passed: for the n-th split of a parent, the ranks that give one color
//! form one communicator, named by their `new:`, its members ordered by key (then by position in the parent), as
//! NCCL documents ("ranks with the same color will be in the same communicator"; "key ... determine the rank order").

use super::decls::Decls;
use super::expand::{Item, Leaf, Scope};
use super::instantiate::instantiate;
use super::issues::{Issue, Issues};
use super::span_index::field;
use super::surface::SOp;
use crate::program::{Comm, RankId};
use std::collections::BTreeMap;
use std::rc::Rc;

/// One rank's call of a split, as instantiated.
struct Call {
    rank: RankId,
    path: Rc<str>,
    new: Option<String>,
    color: Option<i64>,
    key: Option<i64>,
}

/// Declares the communicators created by the `CommSplit`s in `expanded` (per thread: rank, thread index, name,
/// items) in `d`, reporting inconsistent calls: `new` without `color` or the reverse, a negative color, two names
/// for one color, one name for two colors or two splits, a name that is already declared.
pub fn declare(expanded: &[(RankId, u32, &str, Vec<Item>)], d: &mut Decls, issues: &mut Issues) {
    let mut calls: BTreeMap<(String, u32), Vec<Call>> = BTreeMap::new();
    for (rank, _, _, items) in expanded {
        let mut seq: BTreeMap<String, u32> = BTreeMap::new();
        for item in items {
            let op = match &item.leaf {
                Leaf::Op(op) => *op,
                Leaf::Owned(op) => op,
                Leaf::GroupStart | Leaf::GroupEnd => continue,
            };
            if !matches!(op, SOp::CommSplit { .. }) {
                continue;
            }
            // Errors in the arguments are the resolver's to report (it instantiates the op again).
            let scope = Scope { rank: *rank, ranks: d.ranks, env: item.env.as_deref() };
            let Some(SOp::CommSplit { comm, new, color, key }) = instantiate(op, &scope, &item.path, &mut Issues::default()) else {
                continue;
            };
            let n = seq.entry(comm.clone()).or_default();
            let call = Call {
                rank: *rank,
                path: item.path.clone(),
                new,
                color: color.and_then(|c| c.literal()),
                key: key.and_then(|k| k.literal()),
            };
            calls.entry((comm, *n)).or_default().push(call);
            *n += 1;
        }
    }
    let mut created: BTreeMap<String, Rc<str>> = BTreeMap::new();
    // The names of rejected calls: declared afterwards (if nothing else declares them) so that the calls' ops do not
    // also fail as "unknown communicator"; the load fails anyway.
    let mut rejected: BTreeMap<String, RankId> = BTreeMap::new();
    for ((parent, _), list) in calls {
        let Some(&pi) = d.comm_idx.get(&parent) else { continue };
        let pmembers = d.comms[pi as usize].members.clone();
        // color -> (name, first path, members as (key, position in the parent, rank))
        let mut by_color: BTreeMap<i64, (String, Rc<str>, Vec<(i64, usize, RankId)>)> = BTreeMap::new();
        for c in &list {
            let Some(pos) = pmembers.iter().position(|m| *m == c.rank) else { continue };
            let (new, color) = match (&c.new, c.color) {
                (None, None) => continue,
                (Some(n), None) => {
                    rejected.insert(n.clone(), c.rank);
                    issues.push(
                        Issue::new(&*c.path, "a CommSplit that names its `new` communicator needs a `color`")
                            .help("ranks that pass the same color join the same communicator; leave out both `new` and `color` for NCCL_SPLIT_NOCOLOR")
                            .on_rank(c.rank),
                    );
                    continue;
                }
                (None, Some(_)) => {
                    issues.push(
                        Issue::new(field(&c.path, "color"), "a CommSplit with a `color` needs `new:`, the name of the communicator it creates")
                            .help("leave out both `new` and `color` for NCCL_SPLIT_NOCOLOR")
                            .on_rank(c.rank),
                    );
                    continue;
                }
                (Some(n), Some(col)) => (n, col),
            };
            if color < 0 {
                rejected.insert(new.clone(), c.rank);
                issues.push(
                    Issue::new(field(&c.path, "color"), format!("color {color} is negative"))
                        .help("colors are non-negative; NCCL_SPLIT_NOCOLOR is written by leaving out `new` and `color`")
                        .on_rank(c.rank),
                );
                continue;
            }
            let key = c.key.unwrap_or(pos as i64);
            match by_color.get_mut(&color) {
                Some((name, first, members)) => {
                    if name != new {
                        rejected.insert(new.clone(), c.rank);
                        issues.push(
                            Issue::new(field(&c.path, "new"), format!("color {color} joins `{new}` here, but `{name}` on an earlier rank"))
                                .help("every rank that passes one color to the same split joins one communicator: name it the same")
                                .related(field(first, "new"), format!("color {color} named `{name}` here"))
                                .on_rank(c.rank),
                        );
                    } else {
                        members.push((key, pos, c.rank));
                    }
                }
                None => {
                    if let Some((other, (_, p, _))) = by_color.iter().find(|(_, (n, _, _))| n == new) {
                        issues.push(
                            Issue::new(field(&c.path, "new"), format!("`{new}` is named for color {color} here, but for color {other} on an earlier rank"))
                                .help("each color creates its own communicator: give each color its own name (interpolate it: \"half{rank % 2}\")")
                                .related(field(p, "new"), format!("`{new}` for color {other}"))
                                .on_rank(c.rank),
                        );
                        continue;
                    }
                    by_color.insert(color, (new.clone(), c.path.clone(), vec![(key, pos, c.rank)]));
                }
            }
        }
        for (_, (name, path, mut members)) in by_color {
            if let Some(first) = created.get(&name) {
                issues.push(
                    Issue::new(field(&path, "new"), format!("`{name}` is created by two different splits"))
                        .related(field(first, "new"), "first created here"),
                );
                continue;
            }
            if d.comm_idx.contains_key(&name) {
                issues.push(
                    Issue::new(field(&path, "new"), format!("`{name}` is declared in `comms:`, but this CommSplit creates it"))
                        .help("a communicator made by CommSplit is not declared: remove it from `comms:` or give the split another name"),
                );
                continue;
            }
            members.sort_unstable();
            created.insert(name.clone(), path);
            d.comm_idx.insert(name.clone(), d.comms.len() as u32);
            d.comms.push(Comm { name, members: members.into_iter().map(|(_, _, r)| r).collect(), explicit_init: true, nonblocking: false, watchdog_ns: None });
        }
    }
    for (name, rank) in rejected {
        if !d.comm_idx.contains_key(&name) {
            d.comm_idx.insert(name.clone(), d.comms.len() as u32);
            d.comms.push(Comm { name, members: vec![rank], explicit_init: true, nonblocking: false, watchdog_ns: None });
        }
    }
}
