//! Reading past an op that `ron` rejects: an unknown operation name, an unknown field, a value of the wrong type in
//! one op used to stop loading there, hiding every other error of the file. Each such error is reported, `_`
//! (`SOp::Skipped`) is written over the op in the desugared text (padded with blanks to the same length, its lines
//! kept, so that every other position stays where it was), and the text is read again, until it reads or an error
//! cannot be passed that way (a syntax error, an error outside every op, more than [`MAX_SKIPPED_OPS`] ops). The
//! skipped ops are reported and expand to nothing; the load then fails with every error found, and the checks that
//! a missing op could make wrong (group balance, CommInit order, matching, ...) leave its thread alone
//! (`format.rs`).

use super::desugar;
use super::diagnostic::{self, did_you_mean, Diagnostic};
use super::ron_error;
use super::span_index::{field, index, SpanIndex};
use super::surface::{self, SOp, SProgram};
use super::MAX_NESTING_DEPTH;
use ron::extensions::Extensions;

/// At most this many malformed ops are skipped in one file; the next such error stops loading (it is reported, and
/// so is the limit).
pub const MAX_SKIPPED_OPS: usize = 64;

/// The forms that hold ops: a skipped one could have been (or held) any op.
const CONTROL_FORMS: &[&str] = &["Group", "OnRanks", "Parity", "Repeat", "For", "If", "WithStream"];

/// An op the loader skipped.
#[derive(Clone, Debug)]
pub struct Hole {
    /// Where the op starts in the original text.
    pub start: usize,
    /// What it is taken to be: its name when that is an operation's (a field or a value in it was wrong), the
    /// operation its unknown name suggests, or `None` (it could be anything).
    pub meant: Option<String>,
}

impl Hole {
    /// Whether the skipped op could have been (or held) an op of kind `kind` (`"CommSplit"`).
    pub fn could_be(&self, kind: &str) -> bool {
        match self.meant.as_deref() {
            None => true,
            Some(m) => m == kind || CONTROL_FORMS.contains(&m),
        }
    }
}

/// A program as read, with the errors of the ops it skipped (in source order) and where they were.
pub struct Parsed {
    pub surface: SProgram,
    pub diagnostics: Vec<Diagnostic>,
    pub holes: Vec<Hole>,
}

/// Reads `text` (`index`: its light span index), skipping ops that do not deserialize. `Err`: every error found,
/// ending with the one that stopped reading.
pub fn parse(text: &str, index: &SpanIndex) -> Result<Parsed, Vec<Diagnostic>> {
    let desugared = desugar::desugar(text, index);
    // The first reading is the only one of a valid program: the rest is for errors.
    let e = match read(&desugared.text) {
        Ok(surface) => {
            let mut parsed = Parsed { surface, diagnostics: Vec::new(), holes: Vec::new() };
            user_written(text, &mut parsed, None);
            return Ok(parsed);
        }
        Err(e) => e,
    };
    let full = full_index(text);
    let mut rewritten = desugared.text.clone();
    let mut diagnostics = Vec::new();
    let mut holes: Vec<Hole> = Vec::new();
    // Rewritten spans of the skipped ops.
    let mut skipped: Vec<(usize, usize)> = Vec::new();
    let mut skips = 0;
    let mut error = e;
    loop {
        let at = diagnostic::offset_of_line_byte_col(&rewritten, error.position.line, error.position.col);
        let offset = desugared.original_offset(at);
        diagnostics.push(ron_error::diagnostic(text, &full, offset, &error.code));
        let op = ron_error::is_value_error(&error.code).then(|| full.op_at(offset)).flatten();
        let Some((start, end, name)) = op.map(|(_, n)| (n.span.start, n.span.end, n.name.clone())) else {
            return Err(diagnostics);
        };
        let (rs, re) = desugared.rewritten_span(start, end);
        // Inside an op already skipped (never expected: `_` reads), or not an op that reads as a value (a syntax error
        // the value error came from): stop here.
        if skipped.iter().any(|&(a, b)| a <= rs && re <= b) || !reads_as_value(&rewritten[rs..re]) {
            return Err(diagnostics);
        }
        // Counted apart from `holes`, which an op skipped whole around skipped ones shrinks.
        if skips == MAX_SKIPPED_OPS {
            let last = diagnostics.last().map_or(0, |d| d.offset);
            diagnostics.push(
                Diagnostic::at(text, last, 0, format!("loading stopped after {MAX_SKIPPED_OPS} operations it could not read"))
                    .with_help(format!("the limit is MAX_SKIPPED_OPS = {MAX_SKIPPED_OPS}; fix these and load again to see the rest")),
            );
            return Err(diagnostics);
        }
        let meant = match &error.code {
            ron::error::Error::NoSuchEnumVariant { expected, found, outer }
                if outer.as_deref() == Some("operation") && name.as_deref() == Some(found.as_str()) =>
            {
                did_you_mean(found, expected.iter().copied().filter(|v| *v != surface::SKIPPED_OP)).map(str::to_string)
            }
            _ => name,
        };
        // An op skipped whole takes the ops skipped inside it with it.
        holes.retain(|h| !(start <= h.start && h.start < end));
        skipped.retain(|&(a, _)| !(rs <= a && a < re));
        holes.push(Hole { start, meant });
        skipped.push((rs, re));
        skips += 1;
        blank(&mut rewritten, rs, re);
        match read(&rewritten) {
            Ok(surface) => {
                let mut parsed = Parsed { surface, diagnostics, holes };
                user_written(text, &mut parsed, Some(&full));
                return Ok(parsed);
            }
            Err(e) => error = e,
        }
    }
}

/// The program in `text` (desugared), as ron reads it.
fn read(text: &str) -> Result<SProgram, ron::error::SpannedError> {
    ron::Options::default()
        .with_default_extension(Extensions::IMPLICIT_SOME)
        .with_recursion_limit(MAX_NESTING_DEPTH)
        .from_str(text)
}

/// Whether `text` (one op, desugared) is a well-formed RON value, whatever its names and types.
fn reads_as_value(text: &str) -> bool {
    ron::Options::default()
        .with_default_extension(Extensions::IMPLICIT_SOME)
        .with_recursion_limit(MAX_NESTING_DEPTH)
        .from_str::<serde::de::IgnoredAny>(text)
        .is_ok()
}

/// The full span index of `text`, with named parameters aliased to their positions.
fn full_index(text: &str) -> SpanIndex {
    let mut index = SpanIndex::build(text);
    index.alias_positional(surface::POSITIONAL);
    index
}

/// Writes `_` over `text[start..end]`, blanks after it, keeping its line breaks (and so its length and every other
/// position).
fn blank(text: &mut String, start: usize, end: usize) {
    let blanked: String = text[start..end]
        .bytes()
        .enumerate()
        .map(|(i, b)| match b {
            _ if i == 0 => '_',
            b'\n' | b'\r' => b as char,
            _ => ' ',
        })
        .collect();
    // `start` and `end` bound a value the span index found: character boundaries; every byte became one ASCII byte.
    text.replace_range(start..end, &blanked);
}

/// Reports every `_` in `parsed`'s ops that the loader did not write (a user may not write one: it would read as a
/// skipped op) as an unknown operation, and makes it a hole. `full`: the full span index of `text`, if built.
fn user_written(text: &str, parsed: &mut Parsed, full: Option<&SpanIndex>) {
    fn count(ops: &[SOp]) -> usize {
        ops.iter().map(|op| usize::from(matches!(op, SOp::Skipped)) + surface::op_lists(op, "").iter().map(|(l, _)| count(l)).sum::<usize>()).sum()
    }
    if parsed.surface.threads.iter().map(|t| count(&t.ops)).sum::<usize>() == parsed.holes.len() {
        return;
    }
    let built;
    let full = match full {
        Some(f) => f,
        None => {
            built = full_index(text);
            &built
        }
    };
    fn walk(ops: &[SOp], base: &str, full: &SpanIndex, found: &mut Vec<(usize, usize)>) {
        for (i, op) in ops.iter().enumerate() {
            let path = index(base, i);
            if matches!(op, SOp::Skipped) {
                if let Some((_, n)) = full.resolve(&path).filter(|(_, n)| n.name.as_deref() == Some(surface::SKIPPED_OP)) {
                    found.push((n.span.start, n.span.len()));
                }
            }
            for (list, path) in surface::op_lists(op, &path) {
                walk(list, &path, full, found);
            }
        }
    }
    let mut found = Vec::new();
    for (t, thread) in parsed.surface.threads.iter().enumerate() {
        walk(&thread.ops, &field(&index("threads", t), 1), full, &mut found);
    }
    for (start, len) in found {
        if parsed.holes.iter().all(|h| h.start != start) {
            parsed.diagnostics.push(ron_error::unknown_operation(text, start, len, surface::SKIPPED_OP));
            parsed.holes.push(Hole { start, meant: None });
        }
    }
    parsed.diagnostics.sort_by_key(|d| d.offset);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blanking_keeps_length_and_lines() {
        let mut t = String::from("[A, Kernel(\"é\",\n  x: 1), B]");
        let (s, e) = (4, t.find(')').unwrap() + 1);
        blank(&mut t, s, e);
        assert_eq!(t.len(), "[A, Kernel(\"é\",\n  x: 1), B]".len());
        assert_eq!(t.lines().count(), 2);
        assert!(t.starts_with("[A, _   ") && t.ends_with(" , B]"), "{t:?}");
    }
}
