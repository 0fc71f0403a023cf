//! The span index: a tolerant recursive-descent scanner over RON text that records the byte span of every value by
//! its path (`threads[0].ops[3].buf`, `buffers[1].1`), so that errors found after deserialization (which carries no
//! positions) can point into the source. It never fails and never panics, whatever the input.
//!
//! Path syntax: the root value is `""`; a named field appends `.name` (just `name` at the root); a positional field of
//! a tuple, tuple struct or enum variant appends `.0`, `.1`, ...; an element of a list or the value of the i-th entry of
//! a map appends `[i]`.

use super::surface::is_expr_slot;
use std::collections::BTreeMap;

/// Nesting deeper than this is scanned flat (no further paths recorded) so the scanner cannot exhaust the stack.
pub const MAX_SCAN_DEPTH: usize = 256;

/// A byte range `start..end` of the source text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// `true` for an empty span.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// One value found in the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// From the value's first character (the name, for a named struct or enum variant) to just after its last.
    pub span: Span,
    /// The identifier of a named struct / enum variant (`Kernel` in `Kernel(..)`) or of a bare identifier value
    /// (`NonBlocking`).
    pub name: Option<String>,
}

/// Spans of every value of a RON text, by path.
#[derive(Clone, Debug, Default)]
pub struct SpanIndex {
    nodes: BTreeMap<String, Node>,
    /// Start offset and position of every positional argument of a named group `Name(..)` (except `Some(..)`), in
    /// text order: what desugaring turns into named fields `_0:`, `_1:`, ...
    positional: Vec<(usize, usize)>,
    /// Byte ranges of the expressions written unquoted in an expression parameter (`Rank(stage + 1)`,
    /// `For(i, 0..M, ..)`; see `surface::EXPR_SLOTS`), in text order: what desugaring puts in double quotes.
    quoted: Vec<(usize, usize)>,
    /// The positional parameters of each group (`surface::POSITIONAL`) once [`Self::alias_positional`] ran: what
    /// [`Self::resolve`] uses to match a path whose fields are written one way at one level and the other way at
    /// another.
    params: &'static [(&'static str, &'static [&'static str])],
}

impl SpanIndex {
    /// Scans `text`. Malformed or truncated input yields the spans of whatever could be recognised.
    pub fn build(text: &str) -> SpanIndex {
        SpanIndex::scan(text, false)
    }

    /// As [`SpanIndex::build`], but records only the values that can hold or be an operation: groups, tuples,
    /// lists, maps and identifiers, not the strings and numbers in them. Enough to place every op (its origin) and
    /// to desugar; about a third of the nodes of a generated program, so loading a million-op program does not
    /// spend most of its time naming leaves (issue 9, "scale"). Diagnostics use the full index.
    pub fn build_light(text: &str) -> SpanIndex {
        SpanIndex::scan(text, true)
    }

    fn scan(text: &str, light: bool) -> SpanIndex {
        let (positional, quoted) = (Vec::new(), Vec::new());
        let mut s = Scanner { b: text.as_bytes(), pos: 0, nodes: BTreeMap::new(), positional, quoted, light };
        s.skip_trivia();
        s.value(Some(""), 0);
        SpanIndex { nodes: s.nodes, positional: s.positional, quoted: s.quoted, params: &[] }
    }

    /// Byte ranges of the unquoted expressions of expression parameters, in text order.
    pub fn quoted_exprs(&self) -> &[(usize, usize)] {
        &self.quoted
    }

    /// (start offset, position) of every positional argument of a named group other than `Some(..)`, in text order.
    pub fn positional_args(&self) -> &[(usize, usize)] {
        &self.positional
    }

    /// Makes positional paths findable when a parameter was given by name: for every group named in `params`
    /// (group name, parameter names by position), a field written `name: value` is also recorded as `.i` (with
    /// everything below it), unless `.i` is recorded already.
    pub fn alias_positional(&mut self, params: &'static [(&'static str, &'static [&'static str])]) {
        self.params = params;
        let mut added = Vec::new();
        for (path, node) in &self.nodes {
            let Some(group) = node.name.as_deref() else { continue };
            let Some((_, names)) = params.iter().find(|(g, _)| *g == group) else { continue };
            for (i, name) in names.iter().enumerate() {
                let (named, positional) = (field(path, name), field(path, i));
                if self.nodes.contains_key(&positional) {
                    continue;
                }
                for (p, n) in self.nodes.range(named.clone()..) {
                    let Some(rest) = p.strip_prefix(named.as_str()) else { break };
                    if rest.is_empty() || rest.starts_with(['.', '[']) {
                        added.push((format!("{positional}{rest}"), n.clone()));
                    }
                }
            }
        }
        for (p, n) in added {
            self.nodes.entry(p).or_insert(n);
        }
    }

    /// The node recorded for exactly `path`.
    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.get(path)
    }

    /// The node of `path`, or of its nearest enclosing path that was recorded; with the path actually found.
    pub fn resolve<'a>(&'a self, path: &'a str) -> Option<(&'a str, &'a Node)> {
        let mut p = Some(path);
        while let Some(q) = p {
            if let Some(n) = self.nodes.get(q) {
                return Some((q, n));
            }
            if let Some((k, n)) = self.lookup_aliased(q) {
                return Some((k.as_str(), n));
            }
            p = parent(q);
        }
        None
    }

    /// The node of `path` where its fields are written by name at some levels and by position at others
    /// (`Thread("t", ops: [If(c, then: [..])])` reached as `threads[0].1[0].1[0]`): walks the path from the root and
    /// at each level takes the field as recorded, positional or named. [`Self::alias_positional`] aliases one level
    /// only (regression: every op in an `If` branch of a generated SPMD pipeline was placed at the `If`).
    fn lookup_aliased(&self, path: &str) -> Option<(&String, &Node)> {
        if self.params.is_empty() {
            return None;
        }
        let mut cur = String::new();
        for seg in path.split('.') {
            let (name, rest) = seg.find('[').map_or((seg, ""), |i| seg.split_at(i));
            let group = self.nodes.get(&cur).and_then(|n| n.name.as_deref());
            let names = group.and_then(|g| self.params.iter().find(|(f, _)| *f == g)).map_or(&[][..], |(_, n)| *n);
            let other = match name.parse::<usize>() {
                Ok(i) => names.get(i).map(|n| n.to_string()),
                Err(_) => names.iter().position(|n| *n == name).map(|i| i.to_string()),
            };
            let join = |field: &str| if cur.is_empty() { format!("{field}{rest}") } else { format!("{cur}.{field}{rest}") };
            let direct = join(name);
            cur = if self.nodes.contains_key(&direct) {
                direct
            } else {
                let alt = join(other.as_deref()?);
                if !self.nodes.contains_key(&alt) {
                    return None;
                }
                alt
            };
        }
        self.nodes.get_key_value(&cur)
    }

    /// The innermost (shortest) node whose span ends exactly at `offset`, if any: the value a deserializer had just
    /// consumed when it reported an error there.
    pub fn innermost_ending_at(&self, offset: usize) -> Option<(&str, &Node)> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.span.end == offset && !n.span.is_empty())
            .min_by_key(|(_, n)| n.span.len())
            .map(|(p, n)| (p.as_str(), n))
    }

    /// The innermost element of an op list (`surface::OP_LISTS`: a thread's ops, a `Repeat`'s body, ...) whose span
    /// holds `offset` (its end included: a deserializer reports some errors just after what it read), with its path.
    pub fn op_at(&self, offset: usize) -> Option<(&str, &Node)> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.span.start <= offset && offset <= n.span.end && !n.span.is_empty())
            .filter(|(p, _)| self.is_op_element(p))
            .min_by_key(|(_, n)| n.span.len())
            .map(|(p, n)| (p.as_str(), n))
    }

    /// Whether `path` is an element of a list that holds ops: `list[i]` where `list` is a field of a form that
    /// `surface::OP_LISTS` names.
    fn is_op_element(&self, path: &str) -> bool {
        let Some(list) = path.strip_suffix(']').and_then(|p| p.rfind('[').map(|i| &path[..i])) else { return false };
        let Some(owner) = parent(list) else { return false };
        let name = if owner.is_empty() { list } else { &list[owner.len() + 1..] };
        let form = self.nodes.get(owner).and_then(|n| n.name.as_deref());
        super::surface::OP_LISTS.iter().any(|(f, fields)| Some(*f) == form && fields.contains(&name))
    }

    /// Number of recorded values.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
}

/// The enclosing path: `a.b[2].c` → `a.b[2]` → `a.b` → `a` → `""` → none.
pub fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    Some(path.rfind(['.', '[']).map_or("", |i| &path[..i]))
}

/// Appends a named or positional field to a path.
///
/// Built with `push_str` rather than `format!`: resolution builds a dozen of these per op whether or not it reports
/// anything, and `format!` was a fifth of loading a million-op program.
pub fn field(path: &str, name: impl PathPart) -> String {
    let mut out = String::with_capacity(path.len() + 12);
    out.push_str(path);
    if !path.is_empty() {
        out.push('.');
    }
    name.push_to(&mut out);
    out
}

/// Appends a list index to a path.
pub fn index(path: &str, i: usize) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    out.push_str(path);
    out.push('[');
    i.push_to(&mut out);
    out.push(']');
    out
}

/// A field name or position of a path ([`field`]).
pub trait PathPart {
    fn push_to(&self, out: &mut String);
}

impl PathPart for &str {
    fn push_to(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl PathPart for &&str {
    fn push_to(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl PathPart for String {
    fn push_to(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl PathPart for &String {
    fn push_to(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl PathPart for usize {
    fn push_to(&self, out: &mut String) {
        // Decimal digits without the formatting machinery.
        let mut digits = [0u8; 20];
        let (mut v, mut n) = (*self, 0);
        loop {
            digits[n] = b'0' + (v % 10) as u8;
            n += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        out.extend(digits[..n].iter().rev().map(|&d| d as char));
    }
}

/// The opening delimiters `(`, `[`, `{` that are still open at the end of `text` (strings and comments skipped),
/// outermost first, as (byte offset, delimiter).
pub fn unclosed_delimiters(text: &str) -> Vec<(usize, char)> {
    let (positional, quoted) = (Vec::new(), Vec::new());
    let mut s = Scanner { b: text.as_bytes(), pos: 0, nodes: BTreeMap::new(), positional, quoted, light: false };
    let mut open: Vec<(usize, char)> = Vec::new();
    loop {
        s.skip_trivia();
        let Some(c) = s.peek() else { break };
        match c {
            b'"' => s.string(),
            b'\'' => s.char_literal(),
            b'r' if s.raw_string_ahead(1) => {
                s.pos += 1;
                s.raw_string();
            }
            b'(' | b'[' | b'{' => {
                open.push((s.pos, c as char));
                s.pos += 1;
            }
            b')' | b']' | b'}' => {
                let opener = match c {
                    b')' => '(',
                    b']' => '[',
                    _ => '{',
                };
                if open.last().is_some_and(|&(_, o)| o == opener) {
                    open.pop();
                }
                s.pos += 1;
            }
            c if is_ident_start(c) => {
                s.ident();
            }
            _ => s.skip_char(),
        }
    }
    open
}

struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
    nodes: BTreeMap<String, Node>,
    positional: Vec<(usize, usize)>,
    quoted: Vec<(usize, usize)>,
    /// Record only values that can hold or be an op ([`SpanIndex::build_light`]).
    light: bool,
}

/// A character that continues a value into an expression (`stage + 1`, `0..M`, `i >= 2`).
fn is_operator(c: u8) -> bool {
    matches!(c, b'+' | b'-' | b'*' | b'/' | b'%' | b'<' | b'>' | b'=' | b'!' | b'&' | b'|' | b'.')
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    /// Whether the value starting here is recorded: always in a full index; in a light one, unless it is a string,
    /// a character or a number.
    fn records_here(&self) -> bool {
        if !self.light {
            return true;
        }
        match self.peek() {
            Some(b'(' | b'[' | b'{') => true,
            Some(b'r') => !self.raw_string_ahead(1),
            Some(b'b') => !matches!(self.peek_at(1), Some(b'"' | b'r')),
            Some(c) => is_ident_start(c),
            None => false,
        }
    }

    fn peek_at(&self, ahead: usize) -> Option<u8> {
        self.b.get(self.pos + ahead).copied()
    }

    /// Skips whitespace, `//` and (nested) `/* */` comments and `#![...]` attributes.
    fn skip_trivia(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_ascii_whitespace() {
                self.pos += 1;
            } else if c == b'/' && self.peek_at(1) == Some(b'/') {
                while self.peek().is_some_and(|c| c != b'\n') {
                    self.pos += 1;
                }
            } else if c == b'/' && self.peek_at(1) == Some(b'*') {
                self.pos += 2;
                let mut depth = 1usize;
                while depth > 0 {
                    match (self.peek(), self.peek_at(1)) {
                        (None, _) => break,
                        (Some(b'*'), Some(b'/')) => {
                            depth -= 1;
                            self.pos += 2;
                        }
                        (Some(b'/'), Some(b'*')) => {
                            depth += 1;
                            self.pos += 2;
                        }
                        _ => self.pos += 1,
                    }
                }
            } else if c == b'#' && matches!(self.peek_at(1), Some(b'!') | Some(b'[')) {
                while self.peek().is_some_and(|c| c != b'[') {
                    self.pos += 1;
                }
                let mut depth = 0usize;
                while let Some(c) = self.peek() {
                    self.pos += 1;
                    match c {
                        b'[' => depth += 1,
                        b']' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            } else {
                break;
            }
        }
    }

    fn record(&mut self, path: Option<&str>, start: usize, name: Option<String>) {
        if let Some(p) = path {
            let span = Span { start, end: self.pos.max(start) };
            self.nodes.entry(p.to_string()).or_insert(Node { span, name });
        }
    }

    /// Scans one value at the current position (trivia already skipped) and records it under `path`.
    fn value(&mut self, path: Option<&str>, depth: usize) {
        let start = self.pos;
        let Some(c) = self.peek() else { return };
        let mut name = None;
        let nested = depth < MAX_SCAN_DEPTH;
        let path = if nested { path } else { None };
        match c {
            b'"' => self.string(),
            b'\'' => self.char_literal(),
            b'r' if self.raw_string_ahead(1) => {
                self.pos += 1;
                self.raw_string();
            }
            b'b' if self.peek_at(1) == Some(b'"') => {
                self.pos += 1;
                self.string();
            }
            b'b' if self.peek_at(1) == Some(b'r') && self.raw_string_ahead(2) => {
                self.pos += 2;
                self.raw_string();
            }
            b'(' if nested => self.fields(path, depth, None),
            b'[' if nested => self.list(path, depth),
            b'{' if nested => self.map(path, depth),
            b'0'..=b'9' | b'+' | b'-' | b'.' => self.number(),
            c if is_ident_start(c) => {
                let id = self.ident();
                let after_name = self.pos;
                self.skip_trivia();
                if self.peek() == Some(b'(') && super::expr::Func::from_name(&id).is_some() {
                    // `min(a, b)` in a bare expression is a call, not a group: its arguments get no field names.
                    self.balanced();
                } else if self.peek() == Some(b'(') && nested {
                    self.fields(path, depth, (id != "Some").then_some(id.as_str()));
                    name = Some(id);
                } else {
                    self.pos = after_name;
                    name = Some(id);
                }
            }
            _ => self.skip_char(),
        }
        self.record(path, start, name);
    }

    /// A parenthesized part of an expression, `(` to its matching `)` (strings skipped), or to the end of the text.
    fn balanced(&mut self) {
        let mut open = 0usize;
        while let Some(c) = self.peek() {
            match c {
                b'(' => open += 1,
                b')' => {
                    open = open.saturating_sub(1);
                    if open == 0 {
                        self.pos += 1;
                        return;
                    }
                }
                b'"' => {
                    self.string();
                    continue;
                }
                _ => {}
            }
            self.skip_char();
        }
    }

    fn skip_char(&mut self) {
        self.pos += 1;
        while self.peek().is_some_and(|c| (c & 0xC0) == 0x80) {
            self.pos += 1;
        }
    }

    /// An identifier, including raw identifiers `r#name`.
    fn ident(&mut self) -> String {
        let start = self.pos;
        if self.peek() == Some(b'r') && self.peek_at(1) == Some(b'#') {
            self.pos += 2;
            while self.peek().is_some_and(|c| is_ident_char(c) || matches!(c, b'.' | b'+' | b'-')) {
                self.pos += 1;
            }
        } else {
            while self.peek().is_some_and(is_ident_char) {
                self.pos += 1;
            }
        }
        String::from_utf8_lossy(&self.b[start..self.pos]).into_owned()
    }

    fn number(&mut self) {
        let start = self.pos;
        self.pos += 1;
        let hex = self.b[start..].starts_with(b"0x") || self.b[start..].starts_with(b"0X");
        while let Some(c) = self.peek() {
            let prev = self.b[self.pos - 1];
            let exponent_sign = matches!(c, b'+' | b'-') && matches!(prev, b'e' | b'E') && !hex;
            // `0..end` is a range: the number ends before `..` (else `0..(n)` or `0..min(a, b)` was scanned as the
            // number `0..min` followed by a group, and the expression was cut there).
            if c == b'.' && self.peek_at(1) == Some(b'.') {
                break;
            }
            if is_ident_char(c) || c == b'.' || exponent_sign {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    /// A `"..."` string with escapes; an unterminated one runs to the end of the text.
    fn string(&mut self) {
        self.pos += 1;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                b'\\' if self.peek().is_some() => self.pos += 1,
                b'"' => return,
                _ => {}
            }
        }
    }

    fn char_literal(&mut self) {
        self.pos += 1;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                b'\\' if self.peek().is_some() => self.pos += 1,
                b'\'' | b'\n' => return,
                _ => {}
            }
        }
    }

    /// Whether a raw string (`#`* then `"`) starts `ahead` bytes from here.
    fn raw_string_ahead(&self, ahead: usize) -> bool {
        let mut i = self.pos + ahead;
        while self.b.get(i) == Some(&b'#') {
            i += 1;
        }
        self.b.get(i) == Some(&b'"')
    }

    /// A raw string from its `#`s (the `r` already consumed): `#"..."#`.
    fn raw_string(&mut self) {
        let mut hashes = 0;
        while self.peek() == Some(b'#') {
            hashes += 1;
            self.pos += 1;
        }
        self.pos += 1; // the opening quote
        while let Some(c) = self.peek() {
            self.pos += 1;
            if c == b'"' && (0..hashes).all(|k| self.peek_at(k) == Some(b'#')) {
                self.pos += hashes;
                return;
            }
        }
    }

    /// After a value: if an operator follows (or the value was a lone `!`), the rest of an expression, up to the next
    /// `,` or closing delimiter at this level. Returns whether there was one; the position is then just after its
    /// last character.
    fn expr_tail(&mut self, value_start: usize) -> bool {
        let save = self.pos;
        self.skip_trivia();
        let lone_not = save == value_start + 1 && self.b.get(value_start) == Some(&b'!');
        if !(lone_not || self.peek().is_some_and(is_operator)) {
            self.pos = save;
            return false;
        }
        let (mut end, mut open) = (self.pos, 0usize);
        loop {
            self.skip_trivia();
            let Some(c) = self.peek() else { break };
            match c {
                b'(' | b'[' | b'{' => {
                    open += 1;
                    self.pos += 1;
                }
                b')' | b']' | b'}' if open == 0 => break,
                b')' | b']' | b'}' => {
                    open -= 1;
                    self.pos += 1;
                }
                b',' if open == 0 => break,
                b'"' => self.string(),
                _ => self.skip_char(),
            }
            end = self.pos;
        }
        self.pos = end;
        true
    }

    /// A value of a group's field or a list element, followed by the rest of an expression if one follows; records
    /// the whole expression under `path`, and, when `slot` (the value is an expression parameter), marks it for
    /// quoting unless it is a string, a list or a plain integer.
    fn operand(&mut self, path: Option<&str>, depth: usize, slot: bool) {
        let start = self.pos;
        self.value(path, depth);
        let extended = self.expr_tail(start);
        if extended {
            if let Some(p) = path {
                self.nodes.insert(p.to_string(), Node { span: Span { start, end: self.pos }, name: None });
            }
        }
        let text = &self.b[start..self.pos];
        let plain = text.first().is_some_and(|&c| matches!(c, b'"' | b'[' | b'\'')) || text.iter().all(u8::is_ascii_digit);
        if slot && !plain && !text.contains(&b'"') && !text.contains(&b'\\') {
            self.quoted.push((start, self.pos));
        }
    }

    /// The contents of `( .. )`: named fields `name: value` and positional values, comma-separated. `group`: the
    /// group's name when it has one (other than `Some`): its positional values are recorded for desugaring, and
    /// values of its expression parameters for quoting.
    fn fields(&mut self, path: Option<&str>, depth: usize, group: Option<&str>) {
        let named_group = group.is_some();
        self.pos += 1;
        let mut positional = 0usize;
        loop {
            self.skip_trivia();
            let Some(c) = self.peek() else { return };
            match c {
                b')' => {
                    self.pos += 1;
                    return;
                }
                b',' | b']' | b'}' => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let before = self.pos;
            let mut field_name = None;
            if is_ident_start(c) {
                let name = self.ident();
                self.skip_trivia();
                if self.peek() == Some(b':') && self.peek_at(1) != Some(b':') {
                    self.pos += 1;
                    self.skip_trivia();
                    field_name = Some(name);
                } else {
                    self.pos = before;
                }
            }
            let slot = match (&field_name, group) {
                (Some(n), Some(g)) => is_expr_slot(g, n),
                (None, Some(g)) => is_expr_slot(g, &positional.to_string()),
                (_, None) => false,
            };
            let path = path.filter(|_| self.records_here());
            let child = match field_name {
                Some(n) => path.map(|p| field(p, n)),
                None => {
                    if named_group {
                        self.positional.push((self.pos, positional));
                    }
                    positional += 1;
                    path.map(|p| field(p, positional - 1))
                }
            };
            self.operand(child.as_deref(), depth + 1, slot);
            if self.pos == before {
                self.skip_char();
            }
        }
    }

    fn list(&mut self, path: Option<&str>, depth: usize) {
        self.pos += 1;
        let mut i = 0usize;
        loop {
            self.skip_trivia();
            let Some(c) = self.peek() else { return };
            match c {
                b']' => {
                    self.pos += 1;
                    return;
                }
                b',' | b')' | b'}' => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let before = self.pos;
            let child = path.filter(|_| self.records_here()).map(|p| index(p, i));
            self.operand(child.as_deref(), depth + 1, false);
            i += 1;
            if self.pos == before {
                self.skip_char();
            }
        }
    }

    fn map(&mut self, path: Option<&str>, depth: usize) {
        self.pos += 1;
        let mut i = 0usize;
        loop {
            self.skip_trivia();
            let Some(c) = self.peek() else { return };
            match c {
                b'}' => {
                    self.pos += 1;
                    return;
                }
                b',' | b')' | b']' => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let before = self.pos;
            self.value(None, depth + 1);
            self.skip_trivia();
            if self.peek() == Some(b':') {
                self.pos += 1;
                self.skip_trivia();
                let child = path.map(|p| index(p, i));
                self.value(child.as_deref(), depth + 1);
            }
            i += 1;
            if self.pos == before {
                self.skip_char();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of<'a>(text: &'a str, idx: &SpanIndex, path: &str) -> &'a str {
        let n = idx.get(path).unwrap_or_else(|| panic!("no node at `{path}`; have {:?}", idx.nodes.keys()));
        &text[n.span.start..n.span.end]
    }

    const SAMPLE: &str = r#"// header
Program(
    ranks: 2, /* inline */
    streams: [Stream("s0", NonBlocking)],
    buffers: [Buffer("x", "2 GiB"), Buffer("p", 4096, PinnedHost)],
    threads: [
        Thread("main", [
            Kernel(name: "k", stream: "s0", writes: [Slice("x", 0, "1 KiB")]),
            Repeat(2, [Send(to: Next, buf: "x", stream: "s0")]),
            DeviceSync,
        ]),
    ],
)
"#;

    #[test]
    fn records_paths_of_fields_items_and_positionals() {
        let idx = SpanIndex::build(SAMPLE);
        assert!(text_of(SAMPLE, &idx, "").starts_with("Program("));
        assert_eq!(idx.get("").unwrap().name.as_deref(), Some("Program"));
        assert_eq!(text_of(SAMPLE, &idx, "ranks"), "2");
        assert_eq!(text_of(SAMPLE, &idx, "streams[0]"), r#"Stream("s0", NonBlocking)"#);
        assert_eq!(text_of(SAMPLE, &idx, "streams[0].1"), "NonBlocking");
        assert_eq!(idx.get("streams[0].1").unwrap().name.as_deref(), Some("NonBlocking"));
        assert_eq!(text_of(SAMPLE, &idx, "buffers[1].1"), "4096");
        assert_eq!(text_of(SAMPLE, &idx, "buffers[1].2"), "PinnedHost");
        assert_eq!(text_of(SAMPLE, &idx, "threads[0].0"), r#""main""#);
        let k = "threads[0].1[0]";
        assert!(text_of(SAMPLE, &idx, k).starts_with("Kernel(name"));
        assert_eq!(text_of(SAMPLE, &idx, &format!("{k}.stream")), r#""s0""#);
        assert_eq!(text_of(SAMPLE, &idx, &format!("{k}.writes[0]")), r#"Slice("x", 0, "1 KiB")"#);
        assert_eq!(text_of(SAMPLE, &idx, &format!("{k}.writes[0].2")), r#""1 KiB""#);
        assert_eq!(text_of(SAMPLE, &idx, "threads[0].1[1].1[0].to"), "Next");
        assert_eq!(text_of(SAMPLE, &idx, "threads[0].1[2]"), "DeviceSync");
    }

    #[test]
    fn records_positional_arguments_of_named_groups() {
        let t = r#"[Kernel("k", stream: "s", reads: [Slice("x", 0, 4)]), Some("s"), ("a", 1), Rank(1)]"#;
        let idx = SpanIndex::build(t);
        let found: Vec<(&str, usize)> = idx.positional_args().iter().map(|&(o, i)| (&t[o..o + 3], i)).collect();
        assert_eq!(found, vec![("\"k\"", 0), ("\"x\"", 0), ("0, ", 1), ("4)]", 2), ("1)]", 0)]);
    }

    #[test]
    fn named_parameters_are_aliased_to_positions() {
        let t = r#"(ops: [Record(event: "e", stream: "s"), Slice(buf: "x", offset: 0, len: [1]), Record("f", stream: "t")])"#;
        let mut idx = SpanIndex::build(t);
        idx.alias_positional(&[("Record", &["event"]), ("Slice", &["buf", "offset", "len"])]);
        assert_eq!(text_of(t, &idx, "ops[0].0"), "\"e\"");
        assert_eq!(text_of(t, &idx, "ops[1].2[0]"), "1");
        assert_eq!(text_of(t, &idx, "ops[2].0"), "\"f\"");
        assert!(idx.get("ops[0].1").is_none());
    }

    #[test]
    fn resolves_to_nearest_enclosing_path() {
        let idx = SpanIndex::build(SAMPLE);
        let (p, n) = idx.resolve("threads[0].1[0].reads[3]").unwrap();
        assert_eq!(p, "threads[0].1[0]");
        assert!(SAMPLE[n.span.start..].starts_with("Kernel"));
        assert_eq!(idx.resolve("nothing.here").unwrap().0, "");
        assert_eq!(parent("a.b[2].c"), Some("a.b[2]"));
        assert_eq!(parent("a.b[2]"), Some("a.b"));
        assert_eq!(parent("a"), Some(""));
        assert_eq!(parent(""), None);
    }

    #[test]
    fn innermost_node_ending_at_an_offset() {
        let idx = SpanIndex::build(SAMPLE);
        let end = SAMPLE.find("\"2 GiB\"").unwrap() + "\"2 GiB\"".len();
        assert_eq!(idx.innermost_ending_at(end).unwrap().0, "buffers[0].1");
    }

    #[test]
    fn strings_comments_and_raw_strings_do_not_confuse_structure() {
        let t = r##"(a: "x)\"]", /* ( /* nested ) */ [ */ b: r#"raw " ) "#, c: 'x', d: [1, -2.5e-3, 0xFF], e: {"k": (1)})"##;
        let idx = SpanIndex::build(t);
        assert_eq!(text_of(t, &idx, "a"), r#""x)\"]""#);
        assert_eq!(text_of(t, &idx, "b"), r##"r#"raw " ) "#"##);
        assert_eq!(text_of(t, &idx, "c"), "'x'");
        assert_eq!(text_of(t, &idx, "d[1]"), "-2.5e-3");
        assert_eq!(text_of(t, &idx, "d[2]"), "0xFF");
        assert_eq!(text_of(t, &idx, "e[0]"), "(1)");
        assert_eq!(text_of(t, &idx, "e[0].0"), "1");
    }

    #[test]
    fn attributes_and_unicode_are_skipped() {
        let t = "#![enable(implicit_some)]\n// é\n(name: \"ünï\", n: 1)";
        let idx = SpanIndex::build(t);
        assert_eq!(text_of(t, &idx, "name"), "\"ünï\"");
        assert_eq!(text_of(t, &idx, "n"), "1");
    }

    #[test]
    fn truncated_and_garbage_input_never_panics() {
        for t in [SAMPLE, "(((((", "[[[", "\"abc", "r#\"abc", "/* open", "a: b: c", "))]]}}", "é(ü:", "#![", "b\"", "'"] {
            for end in 0..=t.len() {
                if t.is_char_boundary(end) {
                    let _ = SpanIndex::build(&t[..end]);
                }
            }
        }
        let deep = "[".repeat(100_000);
        let idx = SpanIndex::build(&deep);
        assert!(idx.len() <= MAX_SCAN_DEPTH + 1);
    }

    #[test]
    fn finds_unclosed_delimiters() {
        let t = "Program(ranks: 2, threads: [Thread(\"m)\", [ /* ( */ Kernel(name: \"k\")";
        let open = unclosed_delimiters(t);
        let chars: Vec<char> = open.iter().map(|&(_, c)| c).collect();
        assert_eq!(chars, vec!['(', '[', '(', '[']);
        assert_eq!(open[2].0, t.find("Thread(").unwrap() + 6);
        assert!(unclosed_delimiters("(a: [1], b: {})").is_empty());
    }

    #[test]
    fn truncated_text_still_indexes_its_prefix() {
        let t = "Program(ranks: 2, threads: [Thread(\"main\", [Kernel(name: \"k\"";
        let idx = SpanIndex::build(t);
        assert_eq!(text_of(t, &idx, "ranks"), "2");
        assert_eq!(text_of(t, &idx, "threads[0].1[0].name"), "\"k\"");
    }

    /// The light index (issue 9, "scale") is the full one without the leaves: every node it records is in the full
    /// index with the same span and name, and every op, group, list and identifier of the full index is in it, for
    /// the sample and every example program.
    #[test]
    fn light_index_keeps_every_op() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut texts = vec![SAMPLE.to_string()];
        for sub in ["", "streams", "torch"] {
            for e in std::fs::read_dir(dir.join(sub)).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "ron") {
                    texts.push(std::fs::read_to_string(p).unwrap());
                }
            }
        }
        assert!(texts.len() > 10);
        for t in &texts {
            let (full, light) = (SpanIndex::build(t), SpanIndex::build_light(t));
            assert!(light.nodes.len() < full.nodes.len());
            for (p, n) in &light.nodes {
                let f = full.get(p).unwrap_or_else(|| panic!("light-only node {p}"));
                assert_eq!((f.span.start, f.span.end, &f.name), (n.span.start, n.span.end, &n.name), "{p}");
            }
            for (p, n) in &full.nodes {
                let first = t.as_bytes()[n.span.start];
                if n.name.is_some() || matches!(first, b'(' | b'[' | b'{') {
                    assert!(light.get(p).is_some(), "light index lacks {p}");
                }
            }
            assert_eq!(light.positional, full.positional);
            assert_eq!(light.quoted, full.quoted);
        }
    }
}
