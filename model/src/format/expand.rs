//! SPMD expansion of one thread's op list for one rank: `OnRanks`, `Parity` and `Repeat` are resolved and `Group`
//! becomes `GroupStart` .. `GroupEnd`, under a limit on the total number of expanded ops.

use super::decls::rank_out_of_range;
use super::issues::{Issue, Issues};
use super::span_index::{field, index};
use super::surface::SOp;
use super::{MAX_EXPANDED_OPS, MAX_REPEAT_COUNT};
use crate::program::RankId;
use std::rc::Rc;

/// One op after expansion.
#[derive(Clone, Debug)]
pub enum Leaf<'a> {
    /// An op as written (never a control form).
    Op(&'a SOp),
    /// The `ncclGroupStart` a `Group([..])` begins with.
    GroupStart,
    /// The `ncclGroupEnd` a `Group([..])` ends with.
    GroupEnd,
}

/// An expanded op with the path of the op it comes from (shared by every repetition).
#[derive(Clone, Debug)]
pub struct Item<'a> {
    pub leaf: Leaf<'a>,
    pub path: Rc<str>,
}

/// The number of expanded ops left before [`MAX_EXPANDED_OPS`] is reached, over the whole program.
pub struct Budget {
    pub left: usize,
    /// Set once the limit has been hit (and reported); expansion then stops everywhere.
    pub exhausted: bool,
}

impl Budget {
    pub fn new() -> Budget {
        Budget { left: MAX_EXPANDED_OPS, exhausted: false }
    }

    fn take(&mut self, n: usize, path: &str, issues: &mut Issues) -> bool {
        if self.exhausted {
            return false;
        }
        if n > self.left {
            self.exhausted = true;
            issues.push(
                Issue::new(path, format!("the program expands to more than {MAX_EXPANDED_OPS} operations"))
                    .help(format!("the limit is MAX_EXPANDED_OPS = {MAX_EXPANDED_OPS}; use fewer repetitions or ranks")),
            );
            return false;
        }
        self.left -= n;
        true
    }
}

/// Expands `ops` (whose list has path `base`) for `rank` of a program of `ranks` ranks.
pub fn expand<'a>(
    ops: &'a [SOp],
    base: &str,
    rank: RankId,
    ranks: u32,
    budget: &mut Budget,
    issues: &mut Issues,
) -> Vec<Item<'a>> {
    let mut out = Vec::new();
    expand_into(ops, base, rank, ranks, budget, issues, &mut out);
    out
}

fn expand_into<'a>(
    ops: &'a [SOp],
    base: &str,
    rank: RankId,
    ranks: u32,
    budget: &mut Budget,
    issues: &mut Issues,
    out: &mut Vec<Item<'a>>,
) {
    for (i, op) in ops.iter().enumerate() {
        if budget.exhausted {
            return;
        }
        let path = index(base, i);
        match op {
            SOp::Group { ops: inner } => {
                let p: Rc<str> = Rc::from(path.as_str());
                if !budget.take(1, &path, issues) {
                    return;
                }
                out.push(Item { leaf: Leaf::GroupStart, path: p.clone() });
                expand_into(inner, &field(&path, 0), rank, ranks, budget, issues, out);
                if !budget.take(1, &path, issues) {
                    return;
                }
                out.push(Item { leaf: Leaf::GroupEnd, path: p });
            }
            SOp::OnRanks { ranks: on, ops: inner } => {
                for (j, &r) in on.iter().enumerate() {
                    if r >= ranks {
                        issues.push(rank_out_of_range(&index(&field(&path, 0), j), r, ranks));
                    }
                }
                if on.contains(&rank) {
                    expand_into(inner, &field(&path, 1), rank, ranks, budget, issues, out);
                }
            }
            SOp::Parity { even, odd } => {
                let (branch, name) = if rank % 2 == 0 { (even, "even") } else { (odd, "odd") };
                expand_into(branch, &field(&path, name), rank, ranks, budget, issues, out);
            }
            SOp::Repeat { count: n, ops: inner } => {
                if *n > MAX_REPEAT_COUNT {
                    budget.exhausted = true;
                    issues.push(
                        Issue::new(field(&path, 0), format!("Repeat count {n} is over the limit MAX_REPEAT_COUNT = {MAX_REPEAT_COUNT}"))
                            .help("use a smaller count"),
                    );
                    return;
                }
                let start = out.len();
                expand_into(inner, &field(&path, 1), rank, ranks, budget, issues, out);
                let once = out.len() - start;
                if *n == 0 {
                    out.truncate(start);
                    budget.left += once;
                    continue;
                }
                let more = once.saturating_mul(*n as usize - 1);
                if !budget.take(more, &path, issues) {
                    return;
                }
                for _ in 1..*n {
                    out.extend_from_within(start..start + once);
                }
            }
            _ => {
                if !budget.take(1, &path, issues) {
                    return;
                }
                out.push(Item { leaf: Leaf::Op(op), path: Rc::from(path.as_str()) });
            }
        }
    }
}
