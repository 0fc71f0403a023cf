//! SPMD expansion of one thread's op list for one rank: `OnRanks`, `Parity`, `Repeat`, `For` and `If` are resolved
//! and `Group` becomes `GroupStart` .. `GroupEnd`, under a limit on the total number of expanded ops (and of loop
//! iterations). Every expanded op keeps the loop variables in scope where it was written, for resolution to
//! evaluate its rank expressions and interpolated names.

use super::decls::rank_out_of_range;
use super::issues::{Issue, Issues};
use super::span_index::{field, index};
use super::expr::{Func, Value, BUILTIN_VARS};
use super::surface::{ExprArg, SOp};
use super::torch::TorchCx;
use super::{MAX_EXPANDED_OPS, MAX_REPEAT_COUNT};
use crate::program::RankId;
use std::rc::Rc;

/// One op after expansion.
#[derive(Clone, Debug)]
pub enum Leaf<'a> {
    /// An op as written (never a control form).
    Op(&'a SOp),
    /// An op a PyTorch call was lowered to (`torch.rs`), at the call's path.
    Owned(Rc<SOp>),
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
    /// The loop variables bound where the op was written (innermost first); `None` outside every `For`.
    pub env: Option<Rc<Env<'a>>>,
}

/// One loop variable binding of a `For`, linked to the enclosing ones.
#[derive(Debug)]
pub struct Env<'a> {
    pub name: &'a str,
    pub value: i64,
    pub parent: Option<Rc<Env<'a>>>,
}

/// Where expressions are evaluated: the rank the thread runs for, the program's number of ranks, and the loop
/// variables in scope.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'e, 'a> {
    pub rank: RankId,
    pub ranks: u32,
    pub env: Option<&'e Env<'a>>,
}

impl Scope<'_, '_> {
    /// The value of variable `name`: the innermost loop variable of that name, else a built-in (`rank`/`stage`,
    /// `ranks`/`stages`).
    pub fn lookup(&self, name: &str) -> Option<i64> {
        let mut e = self.env;
        while let Some(b) = e {
            if b.name == name {
                return Some(b.value);
            }
            e = b.parent.as_deref();
        }
        match name {
            "rank" | "stage" => Some(i64::from(self.rank)),
            "ranks" | "stages" => Some(i64::from(self.ranks)),
            _ => None,
        }
    }

    /// The names in scope, innermost loop variable first, for "unknown variable" help.
    pub fn names(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let mut e = self.env;
        while let Some(b) = e {
            if !out.contains(&b.name) {
                out.push(b.name);
            }
            e = b.parent.as_deref();
        }
        out.extend(BUILTIN_VARS);
        out
    }

    /// Evaluates `arg`; the error message says which expression failed and, for an unknown variable, what is in
    /// scope.
    pub fn eval(&self, arg: &ExprArg) -> Result<Value, Issue> {
        let expr = arg.expr.as_ref().map_err(|m| Issue::new("", m.clone()))?;
        expr.eval(&|n| self.lookup(n)).map_err(|m| self.issue(&arg.text, m))
    }

    /// An issue (path filled in by the caller) for error `m` of expression `text`.
    pub fn issue(&self, text: &str, m: String) -> Issue {
        let shown = if m.contains(&format!("`{text}`")) { m } else { format!("{m} in `{text}`") };
        let issue = Issue::new("", shown.clone());
        if shown.starts_with("unknown variable") {
            issue.help(format!("in scope here: {}", self.names().join(", ")))
        } else {
            issue
        }
    }
}

/// The number of expanded ops left before [`MAX_EXPANDED_OPS`] is reached, over the whole program, and of `For`
/// iterations (bounded by the same number, so that loops over empty bodies cannot run unbounded).
pub struct Budget {
    pub left: usize,
    pub iterations_left: usize,
    /// Set once the limit has been hit (and reported); expansion then stops everywhere.
    pub exhausted: bool,
}

impl Budget {
    pub fn new() -> Budget {
        Budget { left: MAX_EXPANDED_OPS, iterations_left: MAX_EXPANDED_OPS, exhausted: false }
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

/// The paths of the ops written in the program text, and of the op lists inside them, made once and shared by every
/// rank and loop iteration that expands them (an SPMD program expands each written op thousands of times).
#[derive(Default)]
pub struct PathCache {
    /// (address of the written op, address and length of the field's name): the field is `""` for the op's own path,
    /// else the field holding an op list. Names are keyed by address, not compared (a sixth of loading a 1,024-rank
    /// SPMD pipeline went to comparing them): the same name at two addresses only makes a second, equal entry.
    paths: rustc_hash::FxHashMap<(usize, usize, usize), Rc<str>>,
}

impl PathCache {
    fn get(&mut self, op: &SOp, field: &'static str, make: impl FnOnce() -> String) -> Rc<str> {
        let key = (op as *const SOp as usize, field.as_ptr() as usize, field.len());
        self.paths.entry(key).or_insert_with(|| Rc::from(make())).clone()
    }
}

/// Expands `ops` (whose list has path `base`) for `rank` of a program of `ranks` ranks; `paths` is shared by every
/// call for one program text.
#[allow(clippy::too_many_arguments)]
pub fn expand<'a>(
    ops: &'a [SOp],
    base: &str,
    rank: RankId,
    ranks: u32,
    budget: &mut Budget,
    torch: &mut TorchCx,
    issues: &mut Issues,
    paths: &mut PathCache,
) -> Vec<Item<'a>> {
    let mut out = Vec::new();
    expand_into(ops, base, rank, ranks, &None, budget, torch, issues, paths, &mut out);
    out
}

#[allow(clippy::too_many_arguments)]
fn expand_into<'a>(
    ops: &'a [SOp],
    base: &str,
    rank: RankId,
    ranks: u32,
    env: &Option<Rc<Env<'a>>>,
    budget: &mut Budget,
    torch: &mut TorchCx,
    issues: &mut Issues,
    paths: &mut PathCache,
    out: &mut Vec<Item<'a>>,
) {
    let scope = Scope { rank, ranks, env: env.as_deref() };
    for (i, op) in ops.iter().enumerate() {
        if budget.exhausted {
            return;
        }
        let rc_path = paths.get(op, "", || index(base, i));
        let path: &str = &rc_path;
        // The path of the op list in field `name` of this op.
        let sub = |paths: &mut PathCache, name: &'static str| paths.get(op, name, || field(path, name));
        match op {
            SOp::Group { ops: inner } => {
                let p = rc_path.clone();
                if !budget.take(1, path, issues) {
                    return;
                }
                out.push(Item { leaf: Leaf::GroupStart, path: p.clone(), env: env.clone() });
                expand_into(inner, &sub(paths, "0"), rank, ranks, env, budget, torch, issues, paths, out);
                if !budget.take(1, path, issues) {
                    return;
                }
                out.push(Item { leaf: Leaf::GroupEnd, path: p, env: env.clone() });
            }
            SOp::OnRanks { ranks: on, ops: inner } => {
                for (j, &r) in on.iter().enumerate() {
                    if r >= ranks {
                        issues.push(rank_out_of_range(&index(&field(&path, 0), j), r, ranks));
                    }
                }
                if on.contains(&rank) {
                    expand_into(inner, &sub(paths, "1"), rank, ranks, env, budget, torch, issues, paths, out);
                }
            }
            SOp::Parity { even, odd } => {
                let (branch, name) = if rank % 2 == 0 { (even, "even") } else { (odd, "odd") };
                expand_into(branch, &sub(paths, name), rank, ranks, env, budget, torch, issues, paths, out);
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
                expand_into(inner, &sub(paths, "1"), rank, ranks, env, budget, torch, issues, paths, out);
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
            SOp::For { var, range, ops: inner } => {
                let Some((start, end)) = loop_range(var, range, &scope, &path, issues) else { continue };
                let count = end.saturating_sub(start).max(0) as u64;
                if count > u64::from(MAX_REPEAT_COUNT) || count as usize > budget.iterations_left {
                    budget.exhausted = true;
                    let why = if count > u64::from(MAX_REPEAT_COUNT) {
                        format!("For runs {count} iterations, over the limit MAX_REPEAT_COUNT = {MAX_REPEAT_COUNT}")
                    } else {
                        format!("the program's loops run more than MAX_EXPANDED_OPS = {MAX_EXPANDED_OPS} iterations")
                    };
                    issues.push(Issue::new(field(&path, 1), why).help("use a smaller range").on_rank(rank));
                    return;
                }
                budget.iterations_left -= count as usize;
                for value in start..end {
                    let bound = Some(Rc::new(Env { name: var, value, parent: env.clone() }));
                    expand_into(inner, &sub(paths, "2"), rank, ranks, &bound, budget, torch, issues, paths, out);
                    if budget.exhausted {
                        return;
                    }
                }
            }
            SOp::If { cond, then, otherwise } => match scope.eval(cond) {
                Ok(Value::Bool(true)) => expand_into(then, &sub(paths, "1"), rank, ranks, env, budget, torch, issues, paths, out),
                Ok(Value::Bool(false)) => expand_into(otherwise, &sub(paths, "2"), rank, ranks, env, budget, torch, issues, paths, out),
                Ok(Value::Int(_)) => issues.push(
                    Issue::new(field(&path, 0), format!("`{}` is a number, where If needs a condition", cond.text))
                        .help(format!("compare it, e.g. `If({} > 0, [..])`", cond.text))
                        .on_rank(rank),
                ),
                Err(issue) => issues.push(Issue { path: field(&path, 0), ..issue }.on_rank(rank)),
            },
            // An op the loader could not read (reported): kept as an item, which resolution skips, so that the
            // thread is known to be incomplete (`format.rs`).
            SOp::Skipped => {
                torch.after_skip = true;
                out.push(Item { leaf: Leaf::Op(op), path: rc_path.clone(), env: env.clone() });
            }
            SOp::WithStream { stream, ops: inner } => {
                torch.current.push(stream.clone());
                expand_into(inner, &sub(paths, "1"), rank, ranks, env, budget, torch, issues, paths, out);
                torch.current.pop();
            }
            _ => {
                if let Some(n) = super::torch::lower(op, &path, rank, ranks, env, torch, issues, out) {
                    if !budget.take(n, &path, issues) {
                        return;
                    }
                    continue;
                }
                if !budget.take(1, &path, issues) {
                    return;
                }
                out.push(Item { leaf: Leaf::Op(op), path: rc_path.clone(), env: env.clone() });
            }
        }
    }
}

/// The bounds of `For(var, range, ..)` at `path` in `scope`, or `None` (reported) when the variable name is not
/// usable or a bound does not evaluate to a number.
fn loop_range(var: &str, range: &super::surface::RangeArg, scope: &Scope, path: &str, issues: &mut Issues) -> Option<(i64, i64)> {
    let valid = var.bytes().next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && var.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    if !valid || var == "true" || var == "false" {
        issues.push(
            Issue::new(field(path, 0), format!("`{var}` cannot be a loop variable"))
                .help("a loop variable is a name of letters, digits and `_`, e.g. `For(i, 0..4, [..])`"),
        );
        return None;
    }
    if Func::from_name(var).is_some() {
        issues.push(
            Issue::new(field(path, 0), format!("`{var}` is a function (`{var}(a, b)`) and cannot be a loop variable"))
                .help("give the loop another name, e.g. `For(i, 0..4, [..])`"),
        );
        return None;
    }
    if BUILTIN_VARS.contains(&var) {
        issues.push(
            Issue::new(field(path, 0), format!("`{var}` is a built-in name and cannot be a loop variable"))
                .help(format!("built-ins: {} (the thread's rank and the number of ranks)", BUILTIN_VARS.join(", "))),
        );
        return None;
    }
    if scope.env.is_some_and(|_| scope.names().contains(&var)) {
        issues.push(
            Issue::new(field(path, 0), format!("loop variable `{var}` is already bound by an enclosing For"))
                .help("give the inner loop another name"),
        );
        return None;
    }
    let (a, b) = match &range.bounds {
        Ok(bounds) => bounds,
        Err(m) => {
            issues.push(Issue::new(field(path, 1), m.clone()));
            return None;
        }
    };
    let mut bound = |e: &super::expr::Expr| match e.eval(&|n| scope.lookup(n)) {
        Ok(Value::Int(v)) => Some(v),
        Ok(Value::Bool(_)) => {
            issues.push(Issue::new(field(path, 1), format!("`{e}` in range `{}` is a condition; a bound is a number", range.text)).on_rank(scope.rank));
            None
        }
        Err(m) => {
            let issue = scope.issue(&range.text, m);
            issues.push(Issue { path: field(path, 1), ..issue }.on_rank(scope.rank));
            None
        }
    };
    let (start, end) = (bound(a), bound(b));
    Some((start?, end?))
}
