//! Rendering of program diagnostics for people: a `file:line:column: message` line, then a source snippet with the
//! span underlined, secondary places labelled, and the help (drawn by `miette`).
//!
//! Columns are counted in characters (Unicode scalar values) from 1, everywhere: in the first line, in the
//! snippet's `[file:line:column]` header and in JSON load errors; an editor shows the same column for text with
//! accents or other non-ASCII characters before the error. (miette counts the header's column in bytes; [`Source`]
//! gives it characters.)

use cuorder_model::format::Diagnostic;
use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError, MietteSpanContents, SourceCode, SourceSpan, SpanContents};
use std::fmt;

/// At most this many diagnostics are rendered with a snippet; the rest are summarised in one line
/// ("... and N more errors"), so that printing costs linear time in the number of errors shown.
pub const MAX_RENDERED_ERRORS: usize = 50;

/// A source line longer than this many bytes is not drawn whole: the snippet shows a window of about this many
/// bytes around the error's column instead (the header still gives the true line and column).
pub const MAX_SNIPPET_LINE_BYTES: usize = 1000;

/// Width the snippets are wrapped to, fixed so output does not depend on the terminal.
const RENDER_WIDTH: usize = 100;

/// The program text for miette, named `name`, whose spans' columns are in characters rather than bytes (module docs).
struct Source {
    name: String,
    text: String,
}

impl SourceCode for Source {
    fn read_span<'a>(&'a self, span: &SourceSpan, before: usize, after: usize) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let c = self.text.read_span(span, before, after)?;
        // miette's column is the bytes from the line's start to the span's; the same text counted in characters.
        let start = c.span().offset();
        let column = self.text.get(start.saturating_sub(c.column())..start).map_or(c.column(), |s| s.chars().count());
        Ok(Box::new(MietteSpanContents::new_named(self.name.clone(), c.data(), *c.span(), c.line(), column, c.line_count())))
    }
}

/// One diagnostic as a `miette` report over the program text.
struct Report<'a> {
    diag: &'a Diagnostic,
    source: &'a Source,
}

impl fmt::Debug for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.diag, f)
    }
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.diag.message)
    }
}

impl std::error::Error for Report<'_> {}

impl miette::Diagnostic for Report<'_> {
    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.diag.help.as_ref().map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        // A point (e.g. the end of a truncated file) gets a label, or miette may not draw it next to other labels.
        let label = (self.diag.len == 0).then(|| "here".to_string());
        let primary = LabeledSpan::new_primary_with_span(label, (self.diag.offset, self.diag.len));
        let related = self
            .diag
            .related
            .iter()
            .map(|r| LabeledSpan::new_with_span(Some(r.message.clone()), (r.offset, r.len)));
        Some(Box::new(std::iter::once(primary).chain(related)))
    }
}

/// Renders every diagnostic of the program `text` (read from `file`): for each, a first line
/// `file:line:column: message`, then the snippet. `color` selects ANSI colors; without it the output is plain
/// (Unicode box drawing, no escape codes) and stable, for snapshot tests.
pub fn render(file: &str, text: &str, diags: &[Diagnostic], color: bool) -> String {
    let theme = if color { GraphicalTheme::unicode() } else { GraphicalTheme::unicode_nocolor() };
    let handler = GraphicalReportHandler::new_themed(theme).with_width(RENDER_WIDTH).with_urls(false);
    let source = Source { name: file.to_string(), text: text.to_string() };
    let mut out = String::new();
    for diag in diags.iter().take(MAX_RENDERED_ERRORS) {
        out.push_str(&format!("{file}:{}:{}: {}\n", diag.line, diag.column, diag.message));
        let mut snippet = String::new();
        if touches_long_line(text, diag) {
            snippet = windowed(file, text, diag);
        } else if handler.render_report(&mut snippet, &Report { diag, source: &source }).is_err() {
            snippet = format!("  (could not render a snippet: {diag})\n");
        }
        out.push_str(&snippet);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    if diags.len() > MAX_RENDERED_ERRORS {
        let more = cuorder_model::describe::count((diags.len() - MAX_RENDERED_ERRORS) as u64, "more error");
        out.push_str(&format!("{file}: and {more} (only the first {MAX_RENDERED_ERRORS} are shown)\n"));
    }
    out
}

/// The byte range of the line around `offset`.
fn line_around(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    (start, end)
}

/// Whether a span of the diagnostic is on (or is itself) a line too long to draw whole.
fn touches_long_line(text: &str, diag: &Diagnostic) -> bool {
    let spans = std::iter::once((diag.offset, diag.len)).chain(diag.related.iter().map(|r| (r.offset, r.len)));
    for (offset, len) in spans {
        if len > MAX_SNIPPET_LINE_BYTES {
            return true;
        }
        for at in [offset, offset.saturating_add(len)] {
            let (s, e) = line_around(text, at);
            if e - s > MAX_SNIPPET_LINE_BYTES {
                return true;
            }
        }
    }
    false
}

/// A plain snippet for a diagnostic on a long line: a window of the line around the span, marked `…` where cut,
/// the span underlined, and the help.
fn windowed(file: &str, text: &str, diag: &Diagnostic) -> String {
    let floor = |mut i: usize| {
        i = i.min(text.len());
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let (line_start, line_end) = line_around(text, diag.offset);
    let half = MAX_SNIPPET_LINE_BYTES / 2;
    let from = floor(diag.offset.saturating_sub(half).max(line_start));
    let to = floor(diag.offset.saturating_add(half).min(line_end));
    let shown = text[from..to].replace('\t', " ");
    let lead = if from > line_start { "…" } else { "" };
    let tail = if to < line_end { "…" } else { "" };
    let col = lead.chars().count() + text[from..floor(diag.offset)].chars().count();
    let span_end = floor(diag.offset.saturating_add(diag.len).min(to));
    let width = text[floor(diag.offset)..span_end].chars().count().max(1);
    let gutter = diag.line.to_string();
    let pad = " ".repeat(gutter.len());
    let mut out = format!("  × {}\n", diag.message);
    out.push_str(&format!("{pad} ╭─[{file}:{}:{}] (line shortened to the part around column {})\n", diag.line, diag.column, diag.column));
    out.push_str(&format!("{gutter} │ {lead}{shown}{tail}\n"));
    out.push_str(&format!("{pad} · {}{}\n", " ".repeat(col), "─".repeat(width)));
    out.push_str(&format!("{pad} ╰────\n"));
    if let Some(h) = &diag.help {
        out.push_str(&format!("  help: {h}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diag(text: &str, offset: usize, len: usize) -> Diagnostic {
        Diagnostic::at(text, offset, len, "unknown operation `Kernal`")
    }

    #[test]
    fn at_most_max_rendered_errors_are_drawn_then_a_count() {
        let text = "x\n".repeat(MAX_RENDERED_ERRORS + 5);
        let diags: Vec<Diagnostic> = (0..MAX_RENDERED_ERRORS + 5).map(|i| diag(&text, 2 * i, 1)).collect();
        let out = render("f.ron", &text, &diags, false);
        assert_eq!(out.matches("× unknown operation").count(), MAX_RENDERED_ERRORS, "{out}");
        assert!(out.ends_with("f.ron: and 5 more errors (only the first 50 are shown)\n"), "{out}");
    }

    #[test]
    fn error_past_column_65535_is_windowed_not_a_panic() {
        let text = format!("{}Kernal(\"k\")", "a".repeat(70_000));
        let out = render("long.ron", &text, &[diag(&text, 70_000, 6)], false);
        assert!(out.starts_with("long.ron:1:70001: unknown operation"), "{out}");
        assert!(out.contains("…") && out.contains("Kernal"), "{out}");
        assert!(out.lines().all(|l| l.len() < MAX_SNIPPET_LINE_BYTES + 200), "a line was not shortened");
    }

    /// Regression (issue 33): the first line counted the column in characters, miette's snippet header in bytes
    /// ("1:44" above "[f.ron:1:50]" after three two-byte characters). Both count characters.
    #[test]
    fn snippet_header_counted_columns_in_bytes_after_non_ascii_text() {
        let text = "Program(/* é, ü and ß */ ranks: 1, threads: [Thread(\"m\", [Kernal(\"k\")])])\n";
        let at = text.find("Kernal").unwrap();
        let column = text[..at].chars().count() + 1;
        assert_eq!(at + 1, column + 3, "three characters of two bytes before it");
        let out = render("f.ron", text, &[diag(text, at, 6)], false);
        assert!(out.starts_with(&format!("f.ron:1:{column}: unknown operation")), "{out}");
        assert!(out.contains(&format!("[f.ron:1:{column}]")), "{out}");
        // ASCII text: bytes and characters agree, and so does the output with miette's own count.
        let ascii = text.replace(['é', 'ü', 'ß'], "e");
        let at = ascii.find("Kernal").unwrap();
        assert!(render("f.ron", &ascii, &[diag(&ascii, at, 6)], false).contains(&format!("[f.ron:1:{}]", at + 1)));
    }

    #[test]
    fn lines_within_max_snippet_line_bytes_are_drawn_whole() {
        let text = format!("{}Kernal", "a".repeat(MAX_SNIPPET_LINE_BYTES - 10));
        let out = render("f.ron", &text, &[diag(&text, MAX_SNIPPET_LINE_BYTES - 10, 6)], false);
        assert!(!out.contains("shortened"), "{out}");
    }
}
