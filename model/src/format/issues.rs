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
        let mut out: Vec<Diagnostic> = merge_rank_variants(self.list)
            .into_iter()
            .map(|(issue, on_ranks, rank_independent, merged)| {
                let all = rank_independent || on_ranks.is_empty() || on_ranks.len() as u64 >= u64::from(ranks_of_path(&issue.path));
                // A merged error lists one value per rank: it always says which ranks, in order.
                let message = if all && !merged {
                    issue.message
                } else {
                    let word = if on_ranks.len() == 1 { "rank" } else { "ranks" };
                    format!("{word} {}: {}", rank_list(&on_ranks), issue.message)
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

/// `0, 1, 2, 5` as "0-2, 5": runs of three or more consecutive ranks as ranges.
fn rank_list(ranks: &BTreeSet<RankId>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut it = ranks.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        match end - start {
            0 => parts.push(start.to_string()),
            1 => parts.extend([start.to_string(), end.to_string()]),
            _ => parts.push(format!("{start}-{end}")),
        }
    }
    parts.join(", ")
}

/// The most values of a token shown per merged message; the rest are "…".
const MAX_VALUES_SHOWN: usize = 4;

/// Merges the rank-specific errors at one place that differ only in numbers (the same message with other sizes or
/// ranks on each rank: "recv is 1048576 bytes" on rank 0, "recv is 2097152 bytes" on rank 1) into one, whose
/// differing words list each rank's value in rank order ("recv is 1048576 / 2097152 bytes"), so that a mistake in
/// rank arithmetic is one error, not one per rank. The last field says whether an entry was merged.
fn merge_rank_variants(list: Vec<(Issue, BTreeSet<RankId>, bool)>) -> Vec<(Issue, BTreeSet<RankId>, bool, bool)> {
    let mask = |m: &str| -> Vec<String> { m.split(' ').map(|w| w.replace(|c: char| c.is_ascii_digit(), "#")).collect() };
    let mut groups: Vec<Vec<(Issue, BTreeSet<RankId>, bool)>> = Vec::new();
    let mut by_key: BTreeMap<(String, Option<String>, Vec<String>), usize> = BTreeMap::new();
    for entry in list {
        if entry.2 || entry.1.is_empty() {
            groups.push(vec![entry]);
            continue;
        }
        let key = (entry.0.path.clone(), entry.0.help.clone(), mask(&entry.0.message));
        match by_key.get(&key) {
            Some(&g) => groups[g].push(entry),
            None => {
                by_key.insert(key, groups.len());
                groups.push(vec![entry]);
            }
        }
    }
    groups
        .into_iter()
        .map(|mut g| {
            if g.len() == 1 {
                let (issue, ranks, independent) = g.pop().expect("one entry");
                return (issue, ranks, independent, false);
            }
            let ranks: BTreeSet<RankId> = g.iter().flat_map(|e| e.1.iter().copied()).collect();
            let words: Vec<Vec<&str>> = g.iter().map(|e| e.0.message.split(' ').collect()).collect();
            // Each rank's entry, in rank order.
            let of_rank: Vec<usize> = ranks.iter().map(|r| g.iter().position(|e| e.1.contains(r)).unwrap_or(0)).collect();
            let merged: Vec<String> = (0..words[0].len())
                .map(|i| {
                    if words.iter().all(|w| w[i] == words[0][i]) {
                        return words[0][i].to_string();
                    }
                    // Keep the punctuation around the number once: "1048576," / "2097152," -> "1048576 / 2097152,".
                    let core = |w: &str| w.trim_end_matches([',', ';', ':', ')', '.']).to_string();
                    let tail = &words[0][i][core(words[0][i]).len()..];
                    let mut values: Vec<String> = of_rank.iter().take(MAX_VALUES_SHOWN).map(|&e| core(words[e][i])).collect();
                    if of_rank.len() > MAX_VALUES_SHOWN {
                        values.push("…".to_string());
                    }
                    format!("{}{tail}", values.join(" / "))
                })
                .collect();
            let mut first = g.swap_remove(0);
            first.0.message = merged.join(" ");
            for (issue, _, _) in g {
                for r in issue.related {
                    if !first.0.related.contains(&r) && first.0.related.len() < MAX_VALUES_SHOWN {
                        first.0.related.push(r);
                    }
                }
            }
            (first.0, ranks, false, true)
        })
        .collect()
}
