//! Turns a `ron` deserialization error (syntax errors, unknown variants or fields, missing fields, wrong value types)
//! into a [`Diagnostic`] with a precise span and a helpful message.

use super::diagnostic::{did_you_mean, Diagnostic, Related};
use super::span_index::{unclosed_delimiters, SpanIndex};
use super::surface::{positional_name, SKIPPED_OP};
use ron::error::Error;

/// How many names a "known ..." help lists before it stops.
const MAX_LISTED: usize = 40;

/// The diagnostic for `code`, which `ron` reported at byte `offset` of `text` (positions already mapped back from the
/// desugared text); `index` is the span index of `text`.
pub fn diagnostic(text: &str, index: &SpanIndex, offset: usize, code: &Error) -> Diagnostic {
    let offset = offset.min(text.len());
    if !matches!(code, Error::Eof) && only_trivia(&text[offset..]) {
        return eof(text);
    }
    match code {
        Error::NoSuchEnumVariant { expected, found, outer } => {
            let what = outer.as_deref().unwrap_or("variant");
            let (start, len) = ident_before(text, offset, found);
            unknown_variant(text, start, len, found, expected, what)
        }
        Error::NoSuchStructField { found, outer, .. } if found.starts_with('_') && found[1..].parse::<usize>().is_ok() => {
            let form = outer.as_deref().unwrap_or("this form");
            let params = super::surface::POSITIONAL.iter().find(|(f, _)| *f == form).map_or(&[][..], |(_, p)| *p);
            let (start, len) = token_at(text, offset);
            let d = Diagnostic::at(text, start, len, format!("too many positional arguments for `{form}`"));
            match params.len() {
                0 => d.with_help(format!("`{form}` takes only named arguments (`name: value`)")),
                n => d.with_help(format!("`{form}` takes at most {n} positional argument{}: {}", if n == 1 { "" } else { "s" }, params.join(", "))),
            }
        }
        Error::NoSuchStructField { expected, found, outer } => {
            let expected: Vec<&str> = expected.iter().copied().filter(|f| !f.starts_with('_')).collect();
            let expected = &expected[..];
            let (start, len) = ident_before(text, offset, found);
            let message = match outer {
                Some(o) => format!("unknown field `{found}` in `{o}`"),
                None => format!("unknown field `{found}`"),
            };
            let fields = match outer {
                Some(o) => format!("fields of `{o}`"),
                None => "fields".to_string(),
            };
            with_suggestion(Diagnostic::at(text, start, len, message), found, expected, &fields)
        }
        Error::MissingStructField { field, outer } if outer.as_deref().and_then(|o| positional_name(o, field)).is_some() => {
            let form = outer.as_deref().unwrap_or_default();
            let name = positional_name(form, field).unwrap_or_default();
            let (start, len) = token_at(text, offset);
            let position = field[1..].parse::<usize>().unwrap_or(0) + 1;
            Diagnostic::at(text, start, len, format!("missing `{name}` in `{form}`"))
                .with_help(format!("give it as positional argument {position} or as `{name}: ...`"))
        }
        Error::MissingStructField { field, outer } => {
            let message = match outer {
                Some(o) => format!("missing field `{field}` in `{o}`"),
                None => format!("missing field `{field}`"),
            };
            let (start, len) = token_at(text, offset);
            Diagnostic::at(text, start, len, message).with_help(format!("add `{field}: ...`"))
        }
        Error::DuplicateStructField { field, outer } if outer.as_deref().and_then(|o| positional_name(o, field)).is_some() => {
            let form = outer.as_deref().unwrap_or_default();
            let name = positional_name(form, field).unwrap_or_default();
            let (start, len) = ident_before(text, offset, name);
            Diagnostic::at(text, start, len, format!("`{name}` is given twice in `{form}` (as a positional argument and by name)"))
        }
        Error::DuplicateStructField { field, outer } => {
            let (start, len) = ident_before(text, offset, field);
            let message = match outer {
                Some(o) => format!("field `{field}` is given twice in `{o}`"),
                None => format!("field `{field}` is given twice"),
            };
            Diagnostic::at(text, start, len, message)
        }
        Error::ExpectedDifferentStructName { expected, found } => {
            let (start, len) = ident_before(text, offset, found);
            let d = Diagnostic::at(text, start, len, format!("expected `{expected}`, found `{found}`"));
            d.with_help(format!("write `{expected}(...)`"))
        }
        // ron's own text ("found invalid std identifier `1`, try the raw identifier `r#1` instead") suggests a
        // syntax no program needs.
        Error::SuggestRawIdentifier(found) => {
            let (start, _) = token_at(text, offset);
            let d = Diagnostic::at(text, start, found.len(), format!("expected a name, found `{found}`"));
            if found.bytes().all(|b| b.is_ascii_digit()) {
                d.with_help(format!("a rank is written `Rank({found})`"))
            } else {
                d
            }
        }
        Error::Eof => eof(text),
        Error::UnclosedBlockComment => {
            let start = text.rfind("/*").unwrap_or(text.len());
            Diagnostic::at(text, start, 2, "unclosed block comment").with_help("close it with `*/`")
        }
        Error::ExpectedStringEnd => {
            let start = text[..offset].rfind('"').unwrap_or(offset);
            Diagnostic::at(text, start, 1, "unterminated string").with_help("close it with `\"`")
        }
        Error::Message(m) | Error::InvalidValueForType { expected: m, .. } if !m.is_empty() => {
            let message = match code {
                Error::InvalidValueForType { expected, found } => {
                    let found = if found == "a unit value" { "a bare name (missing quotes?)" } else { found.as_str() };
                    format!("expected {expected}, found {found}")
                }
                _ => m.clone(),
            };
            // The deserializer reports a value's error just after the value: point at that value.
            let (start, len) = match index.innermost_ending_at(offset) {
                Some((_, n)) => (n.span.start, n.span.len()),
                None => token_at(text, offset),
            };
            let d = Diagnostic::at(text, start, len, message);
            if m.contains("a buffer name in double quotes") {
                d.with_help("write \"x\" for the whole buffer or Slice(\"x\", offset, len) for a byte range")
            } else {
                d
            }
        }
        code => {
            let (start, len) = token_at(text, offset);
            Diagnostic::at(text, start, len, syntax_message(code))
        }
    }
}

/// "unknown operation `found`" (or another `what`) at `start..start + len`, with a suggestion among `expected` (less
/// the name of the loader's placeholder for an op it skipped, `surface::SKIPPED_OP`).
fn unknown_variant(text: &str, start: usize, len: usize, found: &str, expected: &[&str], what: &str) -> Diagnostic {
    let expected: Vec<&str> = expected.iter().copied().filter(|v| *v != SKIPPED_OP).collect();
    let d = Diagnostic::at(text, start, len, format!("unknown {what} `{found}`"));
    with_suggestion(d, found, &expected, &format!("{what}s"))
}

/// "unknown operation `_`" for a `_` written in an op list at `start..start + len`: ron reads it as the loader's
/// placeholder for a skipped op (`surface::SKIPPED_OP`), which a user may not write.
pub fn unknown_operation(text: &str, start: usize, len: usize, found: &str) -> Diagnostic {
    // The operations' names, as ron lists them for a name it does not know.
    let expected = match ron::from_str::<super::surface::SOp>("NoSuchOperation") {
        Err(ron::error::SpannedError { code: Error::NoSuchEnumVariant { expected, .. }, .. }) => expected,
        _ => &[],
    };
    unknown_variant(text, start, len, found, expected, "operation")
}

/// Whether ron's error `code` is about a value that was read whole (a name, a field, a type it does not fit) rather
/// than about the text's syntax: after such an error in an op, the op can be skipped and the rest of the text read.
pub fn is_value_error(code: &Error) -> bool {
    matches!(
        code,
        Error::Message(_)
            | Error::ExpectedArray
            | Error::ExpectedBoolean
            | Error::ExpectedChar
            | Error::ExpectedFloat
            | Error::ExpectedInteger
            | Error::ExpectedOption
            | Error::ExpectedMap
            | Error::ExpectedDifferentStructName { .. }
            | Error::ExpectedStructLike
            | Error::ExpectedNamedStructLike(_)
            | Error::ExpectedUnit
            | Error::ExpectedString
            | Error::ExpectedIdentifier
            | Error::SuggestRawIdentifier(_)
            | Error::IntegerOutOfBounds
            | Error::InvalidValueForType { .. }
            | Error::ExpectedDifferentLength { .. }
            | Error::NoSuchEnumVariant { .. }
            | Error::NoSuchStructField { .. }
            | Error::MissingStructField { .. }
            | Error::DuplicateStructField { .. }
    )
}

/// "unexpected end of file", pointing at the last character of the text (or its end when it is blank), with the
/// innermost delimiter still open as related place.
fn eof(text: &str) -> Diagnostic {
    let last = text.trim_end().char_indices().last().map(|(i, c)| (i, c.len_utf8()));
    let (at, len) = last.unwrap_or((text.len(), 0));
    let mut d = Diagnostic::at(text, at, len, "unexpected end of file");
    let open = unclosed_delimiters(text);
    if let Some(&(at, c)) = open.last() {
        let close: String = open
            .iter()
            .rev()
            .map(|&(_, o)| match o {
                '(' => ')',
                '[' => ']',
                _ => '}',
            })
            .collect();
        d.related.push(Related::at(text, at, 1, format!("this `{c}` is never closed")));
        d = d.with_help(format!("the file may be truncated: it ends with {} unclosed delimiter(s); `{close}` would close them", open.len()));
    } else {
        d = d.with_help("the file may be truncated or empty: it should contain `Program(...)`");
    }
    d
}

/// `true` when `s` holds only whitespace and comments.
fn only_trivia(s: &str) -> bool {
    let mut rest = s.trim_start();
    loop {
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |i| &r[i..]).trim_start();
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]).trim_start();
        } else {
            return rest.is_empty();
        }
    }
}

/// Adds "did you mean" (or a list of the known names) to `d`.
fn with_suggestion(d: Diagnostic, found: &str, expected: &[&str], what: &str) -> Diagnostic {
    if let Some(s) = did_you_mean(found, expected.iter().copied()) {
        d.with_help(format!("did you mean `{s}`?"))
    } else if expected.is_empty() {
        d
    } else {
        let mut list: Vec<&str> = expected.iter().copied().take(MAX_LISTED).collect();
        if expected.len() > MAX_LISTED {
            list.push("...");
        }
        d.with_help(format!("{what}: {}", list.join(", ")))
    }
}

/// The span of the last occurrence of identifier `ident` ending at or before `offset` (ron reports the position just
/// after it), or the token at `offset` when it is not found nearby.
fn ident_before(text: &str, offset: usize, ident: &str) -> (usize, usize) {
    let end = offset.min(text.len());
    if !ident.is_empty() {
        if let Some(start) = text[..end].rfind(ident) {
            if end - start <= ident.len() + 64 {
                return (start, ident.len());
            }
        }
    }
    token_at(text, offset)
}

/// The span of the token at `offset` (after whitespace): an identifier or number, else one character; empty at the
/// end of the text.
fn token_at(text: &str, offset: usize) -> (usize, usize) {
    let mut start = offset.min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let rest = &text[start..];
    let trimmed = rest.trim_start();
    start += rest.len() - trimmed.len();
    let Some(c) = trimmed.chars().next() else { return (start, 0) };
    if c.is_ascii_alphanumeric() || c == '_' {
        let len = trimmed.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(trimmed.len());
        (start, len)
    } else {
        (start, c.len_utf8())
    }
}

/// A message for the remaining ron error codes, in our style (lowercase, no period).
fn syntax_message(code: &Error) -> String {
    match code {
        Error::ExpectedComma => "expected `,`".to_string(),
        Error::ExpectedArray => "expected a list `[...]`".to_string(),
        Error::ExpectedArrayEnd => "expected `]` or `,`".to_string(),
        Error::ExpectedStructLike => "expected `(`".to_string(),
        Error::ExpectedStructLikeEnd => "expected `)` or `,`".to_string(),
        Error::ExpectedMapColon => "expected `:`".to_string(),
        Error::ExpectedString => "expected a string in double quotes".to_string(),
        Error::ExpectedInteger => "expected a non-negative integer".to_string(),
        Error::ExpectedIdentifier => "expected a name (an identifier)".to_string(),
        Error::ExpectedUnit => "expected nothing here (a name without parentheses)".to_string(),
        Error::IntegerOutOfBounds => "integer out of range".to_string(),
        Error::TrailingCharacters => "unexpected text after the end of the program".to_string(),
        Error::ExceededRecursionLimit => {
            format!("nesting too deep: the limit is MAX_NESTING_DEPTH = {} levels", super::MAX_NESTING_DEPTH)
        }
        other => {
            let s = other.to_string();
            let mut c = s.chars();
            match c.next() {
                Some(first) => first.to_lowercase().chain(c).collect::<String>().trim_end_matches('.').to_string(),
                None => "syntax error".to_string(),
            }
        }
    }
}
