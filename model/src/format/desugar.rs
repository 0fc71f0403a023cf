//! Positional arguments: `Kernel("fwd", stream: "s0")` is not RON (RON has either all-positional tuples or
//! all-named structs), so before `ron` parses a program every positional argument of a named group `Name(..)`
//! (except `Some(..)`) is rewritten to a named field `_0: "fwd"`, `_1: ..`, which the surface types accept
//! (aliased to the parameter's real name). Insertions never add lines; this module maps positions back.

use super::span_index::SpanIndex;

/// The rewritten text and where text was inserted.
pub struct Desugared {
    pub text: String,
    /// (offset in the original text, inserted length), in order.
    inserts: Vec<(usize, usize)>,
}

/// Rewrites the positional arguments that `index` (built on `text`) found, and puts the unquoted expressions of
/// expression parameters in double quotes (`Rank(stage + 1)` → `Rank(_0: "stage + 1")`).
pub fn desugar(text: &str, index: &SpanIndex) -> Desugared {
    // (offset, order at one offset, inserted text): a field name goes before the quote that opens its value.
    let mut edits: Vec<(usize, u8, String)> = index.positional_args().iter().map(|&(o, i)| (o, 0, format!("_{i}: "))).collect();
    for &(start, end) in index.quoted_exprs() {
        edits.push((start, 1, "\"".to_string()));
        edits.push((end, 0, "\"".to_string()));
    }
    edits.sort_by_key(|&(o, order, _)| (o, order));
    let mut out = String::with_capacity(text.len() + edits.len() * 5);
    let mut inserts = Vec::with_capacity(edits.len());
    let mut copied = 0;
    for (offset, _, insert) in edits {
        if offset < copied || !text.is_char_boundary(offset) {
            continue;
        }
        out.push_str(&text[copied..offset]);
        inserts.push((offset, insert.len()));
        out.push_str(&insert);
        copied = offset;
    }
    out.push_str(&text[copied..]);
    Desugared { text: out, inserts }
}

impl Desugared {
    /// The offset in the original text of `offset` in the rewritten text; an offset inside inserted text maps to the
    /// start of the argument it was inserted before.
    pub fn original_offset(&self, offset: usize) -> usize {
        let mut shift = 0;
        for &(at, len) in &self.inserts {
            let start = at + shift;
            if offset < start {
                break;
            }
            if offset < start + len {
                return at;
            }
            shift += len;
        }
        offset - shift
    }

    /// The byte range in the rewritten text of the value written at `start..end` of the original text: what was
    /// inserted before the value (its field name) stays outside, what was inserted inside it is in.
    pub fn rewritten_span(&self, start: usize, end: usize) -> (usize, usize) {
        let shift = |inside: &dyn Fn(usize) -> bool| -> usize { self.inserts.iter().filter(|&&(at, _)| inside(at)).map(|&(_, len)| len).sum() };
        (start + shift(&|at| at <= start), end + shift(&|at| at < end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_positional_arguments_and_maps_back() {
        let t = "[Kernel(\"k\", stream: \"s\"), Some(\"x\"), Slice(\"b\", 0, 4)]";
        let d = desugar(t, &SpanIndex::build(t));
        assert_eq!(d.text, "[Kernel(_0: \"k\", stream: \"s\"), Some(\"x\"), Slice(_0: \"b\", _1: 0, _2: 4)]");
        assert_eq!(d.original_offset(0), 0);
        let k = d.text.find("\"k\"").unwrap();
        assert_eq!(d.original_offset(k), t.find("\"k\"").unwrap());
        assert_eq!(d.original_offset(k - 2), t.find("\"k\"").unwrap(), "inside `_0: `");
        let four = d.text.find('4').unwrap();
        assert_eq!(d.original_offset(four), t.find('4').unwrap());
        assert_eq!(d.original_offset(d.text.len()), t.len());
    }

    #[test]
    fn quotes_expressions_of_expression_parameters() {
        let t = "[Send(to: Rank(stage + 1)), For(i, 0..M - 1, [If(!last && i > 0, [])]), Rank(2), Rank(\"i\"), Kernel(k + 1)]";
        let d = desugar(t, &SpanIndex::build(t));
        assert_eq!(
            d.text,
            "[Send(to: Rank(_0: \"stage + 1\")), For(_0: \"i\", _1: \"0..M - 1\", _2: [If(_0: \"!last && i > 0\", _1: [])]), \
             Rank(_0: 2), Rank(_0: \"i\"), Kernel(_0: k + 1)]"
        );
        let plus = d.text.find('+').unwrap();
        assert_eq!(d.original_offset(plus), t.find('+').unwrap());
        let m = d.text.find('M').unwrap();
        assert_eq!(d.original_offset(m), t.find('M').unwrap());
    }

    #[test]
    fn named_only_text_is_unchanged() {
        let t = "Program(ranks: 1, threads: [])";
        assert_eq!(desugar(t, &SpanIndex::build(t)).text, t);
    }
}
