//! Validation errors as they are found (anchored to value paths, not spans), merged across ranks and repetitions,
//! and their conversion to [`Diagnostic`]s through the span index.

use super::diagnostic::{Diagnostic, LineIndex, Related};
use super::span_index::SpanIndex;
use crate::program::RankId;
use std::collections::{BTreeMap, BTreeSet};

/// One validation error, before it has a span.
#[derive(Clone, Debug)]
pub struct Issue {
    /// Value path of the offending value, e.g. `threads[0].1[3].buf`.
    pub path: String,
    pub message: String,
    pub help: Option<String>,
    /// Other places (path, label).
    pub related: Vec<(String, String)>,
    /// The rank whose expansion produced the error, when the error depends on the rank.
    pub rank: Option<RankId>,
}

impl Issue {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Issue {
        Issue { path: path.into(), message: message.into(), help: None, related: Vec::new(), rank: None }
    }

    /// With a help text.
    pub fn help(mut self, help: impl Into<String>) -> Issue {
        self.help = Some(help.into());
        self
    }

    /// With a secondary place.
    pub fn related(mut self, path: impl Into<String>, label: impl Into<String>) -> Issue {
        self.related.push((path.into(), label.into()));
        self
    }

    /// Found while expanding `rank`.
    pub fn on_rank(mut self, rank: RankId) -> Issue {
        self.rank = Some(rank);
        self
    }
}

/// The errors found so far. The same error (path and message) found on several ranks or in several repetitions is
/// kept once, with the set of ranks it was found on.
#[derive(Default)]
pub struct Issues {
    list: Vec<(Issue, BTreeSet<RankId>, bool)>,
    by_key: BTreeMap<(String, String), usize>,
}

impl Issues {
    /// Records `issue` (merged with an equal one already recorded).
    pub fn push(&mut self, issue: Issue) {
        let key = (issue.path.clone(), issue.message.clone());
        let i = *self.by_key.entry(key).or_insert_with(|| {
            self.list.push((issue.clone(), BTreeSet::new(), false));
            self.list.len() - 1
        });
        match issue.rank {
            Some(r) => {
                self.list[i].1.insert(r);
            }
            None => self.list[i].2 = true,
        }
    }

    /// `true` when no error was recorded.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The diagnostics, in source order. An error found on fewer ranks than run the code at its path
    /// (`ranks_of_path`) says on which.
    pub fn into_diagnostics(self, text: &str, index: &SpanIndex, ranks_of_path: impl Fn(&str) -> u32) -> Vec<Diagnostic> {
        let lines = LineIndex::new(text);
        let span = |path: &str| index.resolve(path).map_or((0, 0), |(_, n)| (n.span.start, n.span.len()));
        let mut out: Vec<Diagnostic> = self
            .list
            .into_iter()
            .map(|(issue, on_ranks, rank_independent)| {
                let all = rank_independent || on_ranks.is_empty() || on_ranks.len() as u64 >= u64::from(ranks_of_path(&issue.path));
                let message = if all {
                    issue.message
                } else {
                    let list: Vec<String> = on_ranks.iter().map(|r| r.to_string()).collect();
                    let word = if list.len() == 1 { "rank" } else { "ranks" };
                    format!("{word} {}: {}", list.join(", "), issue.message)
                };
                let (offset, len) = span(&issue.path);
                let mut d = Diagnostic::at_indexed(&lines, offset, len, message);
                d.help = issue.help;
                d.path = Some(issue.path);
                d.related = issue
                    .related
                    .iter()
                    .map(|(p, label)| {
                        let (o, l) = span(p);
                        Related::at_indexed(&lines, o, l, label.clone())
                    })
                    .collect();
                d
            })
            .collect();
        out.sort_by(|a, b| (a.offset, &a.message).cmp(&(b.offset, &b.message)));
        out
    }
}
