//! Rendering of program diagnostics for people: a `file:line:column: message` line, then a source snippet with the
//! span underlined, secondary places labelled, and the help (drawn by `miette`).

use cuorder_model::format::Diagnostic;
use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceCode};
use std::fmt;

/// Width the snippets are wrapped to, fixed so output does not depend on the terminal.
const RENDER_WIDTH: usize = 100;

/// One diagnostic as a `miette` report over the program text.
struct Report<'a> {
    diag: &'a Diagnostic,
    source: &'a NamedSource<String>,
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
    let source = NamedSource::new(file, text.to_string());
    let mut out = String::new();
    for diag in diags {
        out.push_str(&format!("{file}:{}:{}: {}\n", diag.line, diag.column, diag.message));
        let mut snippet = String::new();
        if handler.render_report(&mut snippet, &Report { diag, source: &source }).is_err() {
            snippet = format!("  (could not render a snippet: {diag})\n");
        }
        out.push_str(&snippet);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}
