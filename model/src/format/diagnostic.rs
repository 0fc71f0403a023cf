//! Diagnostics of the surface format: a message anchored to a byte span of the source text, with line and column,
//! and helpers to compute positions and "did you mean" suggestions.

use std::fmt;

/// One problem found in a program text: where it is (byte `offset` and `len` in the text, 1-based `line` and
/// `column`, the column counted in characters), what is wrong (`message`), how to fix it (`help`) and, for
/// validation errors, the value path it concerns (e.g. `threads[0].ops[3].buf`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Byte offset of the start of the span in the source text.
    pub offset: usize,
    /// Length of the span in bytes (0 for a point, e.g. the end of a truncated file).
    pub len: usize,
    /// 1-based line of `offset`.
    pub line: u32,
    /// 1-based column of `offset`, in characters.
    pub column: u32,
    /// What is wrong, one sentence, no trailing period.
    pub message: String,
    /// How to fix it, when there is something useful to say.
    pub help: Option<String>,
    /// The value path the problem concerns (validation errors only; `None` for syntax errors).
    pub path: Option<String>,
    /// Other places that take part in the problem (e.g. the send that a mismatched recv matches).
    pub related: Vec<Related>,
}

/// A secondary place of a [`Diagnostic`], with a short label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Related {
    /// Byte offset of the start of the span.
    pub offset: usize,
    /// Length of the span in bytes.
    pub len: usize,
    /// 1-based line of `offset`.
    pub line: u32,
    /// 1-based column of `offset`, in characters.
    pub column: u32,
    /// What this place is, e.g. "the matching send (4096 bytes)".
    pub message: String,
}

impl Diagnostic {
    /// A diagnostic for the span `offset..offset + len` of `text`; `offset` is clamped into the text and down to a
    /// character boundary, `len` to the end of the text.
    pub fn at(text: &str, offset: usize, len: usize, message: impl Into<String>) -> Diagnostic {
        let (offset, len) = clamp_span(text, offset, len);
        let (line, column) = line_col(text, offset);
        Diagnostic { offset, len, line, column, message: message.into(), help: None, path: None, related: Vec::new() }
    }

    /// The same diagnostic with a help text.
    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }
}

impl Related {
    /// A secondary place for the span `offset..offset + len` of `text`, clamped like [`Diagnostic::at`].
    pub fn at(text: &str, offset: usize, len: usize, message: impl Into<String>) -> Related {
        let (offset, len) = clamp_span(text, offset, len);
        let (line, column) = line_col(text, offset);
        Related { offset, len, line, column, message: message.into() }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// Clamps a span into `text`: the start down to a character boundary, the end up to one.
fn clamp_span(text: &str, offset: usize, len: usize) -> (usize, usize) {
    let mut start = offset.min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = offset.saturating_add(len).clamp(start, text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    (start, end - start)
}

/// The 1-based line and column (in characters) of byte `offset` of `text` (clamped into the text).
pub fn line_col(text: &str, offset: usize) -> (u32, u32) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = text[line_start..offset].chars().count() + 1;
    (saturate(line), saturate(column))
}

/// Line starts of a text, for computing many positions quickly.
pub struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
    /// Per line: whether it is all ASCII (then a column is a byte difference).
    ascii: Vec<bool>,
}

impl<'a> LineIndex<'a> {
    pub fn new(text: &'a str) -> LineIndex<'a> {
        let starts: Vec<usize> = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        let ascii = starts
            .iter()
            .enumerate()
            .map(|(i, &s)| text.as_bytes()[s..starts.get(i + 1).copied().unwrap_or(text.len())].is_ascii())
            .collect();
        LineIndex { text, starts, ascii }
    }

    /// The same as [`line_col`], in logarithmic time (plus the length of the line when it is not ASCII), so that
    /// positioning many errors on one long line stays linear.
    pub fn line_col(&self, offset: usize) -> (u32, u32) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.starts.partition_point(|&s| s <= offset);
        let start = self.starts[line - 1];
        let column = if self.ascii[line - 1] { offset - start } else { self.text[start..offset].chars().count() };
        (saturate(line), saturate(column + 1))
    }
}

impl Diagnostic {
    /// [`Diagnostic::at`], positioned through a [`LineIndex`] of the same text (for many diagnostics).
    pub fn at_indexed(lines: &LineIndex, offset: usize, len: usize, message: impl Into<String>) -> Diagnostic {
        let (offset, len) = clamp_span(lines.text, offset, len);
        let (line, column) = lines.line_col(offset);
        Diagnostic { offset, len, line, column, message: message.into(), help: None, path: None, related: Vec::new() }
    }
}

impl Related {
    /// [`Related::at`], positioned through a [`LineIndex`] of the same text.
    pub fn at_indexed(lines: &LineIndex, offset: usize, len: usize, message: impl Into<String>) -> Related {
        let (offset, len) = clamp_span(lines.text, offset, len);
        let (line, column) = lines.line_col(offset);
        Related { offset, len, line, column, message: message.into() }
    }
}

/// The byte offset of 1-based `line` and byte-counted `column` (as ron reports positions), clamped into the text.
pub fn offset_of_line_byte_col(text: &str, line: usize, column: usize) -> usize {
    let mut start = 0usize;
    for _ in 1..line.max(1) {
        match text[start..].find('\n') {
            Some(i) => start += i + 1,
            None => return text.len(),
        }
    }
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i + 1);
    let mut offset = start.saturating_add(column.saturating_sub(1)).min(line_end);
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Levenshtein edit distance between two strings (in characters).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The candidate closest to `name`, if it is close enough to be a plausible typo: equal but for case, a prefix of at
/// least 3 characters (`NonBlock` for `NonBlocking`), or an edit distance of at most a third of the length (at least
/// 1, and less than the length). On a tie, the first candidate wins. Names and candidates longer than
/// [`super::MAX_SUGGESTED_NAME_CHARS`] get no suggestion and are never suggested, which bounds the cost of one
/// comparison.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    use super::MAX_SUGGESTED_NAME_CHARS;
    if name.len() > 4 * MAX_SUGGESTED_NAME_CHARS {
        return None;
    }
    let n = name.chars().count();
    if n > MAX_SUGGESTED_NAME_CHARS {
        return None;
    }
    let limit = (n / 3).max(1).min(n.saturating_sub(1));
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        if c.len() > 4 * MAX_SUGGESTED_NAME_CHARS || c.chars().count() > MAX_SUGGESTED_NAME_CHARS {
            continue;
        }
        let prefix = n >= 3 && (c.starts_with(name) || name.starts_with(c)) && c != name;
        let d = if c.eq_ignore_ascii_case(name) || prefix { 0 } else { edit_distance(name, c) };
        if d <= limit && !best.is_some_and(|(bd, _)| bd <= d) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters() {
        let t = "ab\nçd\n";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 3), (2, 1));
        assert_eq!(line_col(t, 5), (2, 2)); // after the 2-byte ç
        assert_eq!(line_col(t, 4), (2, 1)); // inside ç: clamped down
        assert_eq!(line_col(t, 100), (3, 1));
    }

    #[test]
    fn line_index_agrees_with_line_col() {
        let t = "ab\nçd\n\nxyz";
        let li = LineIndex::new(t);
        for o in 0..=t.len() + 2 {
            assert_eq!(li.line_col(o), line_col(t, o), "offset {o}");
        }
    }

    #[test]
    fn ron_positions_map_to_offsets() {
        let t = "ab\ncdef\n";
        assert_eq!(offset_of_line_byte_col(t, 1, 1), 0);
        assert_eq!(offset_of_line_byte_col(t, 2, 3), 5);
        assert_eq!(offset_of_line_byte_col(t, 2, 99), 8);
        assert_eq!(offset_of_line_byte_col(t, 9, 1), t.len());
        assert_eq!(offset_of_line_byte_col(t, 0, 0), 0);
    }

    #[test]
    fn suggestions_skip_names_over_the_limit() {
        let long = "a".repeat(super::super::MAX_SUGGESTED_NAME_CHARS + 1);
        let near = format!("{long}b");
        assert_eq!(did_you_mean(&near, [long.as_str()]), None);
        assert_eq!(did_you_mean("ab", [long.as_str(), "abc"]), None.or(Some("abc")));
        let ok = "a".repeat(super::super::MAX_SUGGESTED_NAME_CHARS - 1);
        assert_eq!(did_you_mean(&format!("{ok}b"), [ok.as_str()]), Some(ok.as_str()));
    }

    #[test]
    fn suggestions() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(did_you_mean("s1", ["s0", "sL"]), Some("s0"));
        assert_eq!(did_you_mean("Kernal", ["Kernel", "Memset"]), Some("Kernel"));
        assert_eq!(did_you_mean("world", ["pair01"]), None);
        assert_eq!(did_you_mean("SL", ["sL"]), Some("sL"));
        assert_eq!(did_you_mean("NonBlock", ["Blocking", "NonBlocking"]), Some("NonBlocking"));
        assert_eq!(did_you_mean("q", ["p", "x"]), None);
    }

    #[test]
    fn spans_are_clamped() {
        let d = Diagnostic::at("aé", 2, 10, "m");
        assert_eq!((d.offset, d.len), (1, 2));
        assert_eq!((d.line, d.column), (1, 2));
    }
}
