//! Symbolic sizes as expressions: `past_sequence_length + sequence_length`, `2*batch`,
//! `max(past, total)`, `floordiv(H + 1, 2) + 1`.
//!
//! A [`Dim::Sym`] holds either a plain name (a `dim_param` of the file) or an expression over
//! names that inference derived, in one canonical text so that equal expressions are equal
//! symbols: a sum of terms, each an integer coefficient times a product of atoms (names, or
//! `max(..)` / `min(..)` of two expressions), terms in a fixed order, `+` and `-` between
//! spaces, `*` without (`2*batch*seq + past - 1`). The same text is what a `dim_param` of a
//! written file would hold, and what ONNX Runtime's own symbolic shape inference writes.
//!
//! Reading a symbol back: a name is an atom unless it parses whole as such an expression
//! (binary `+`/`-` are recognised only between spaces, so a declared `seq-len` stays one
//! name). Expressions are kept small: past [`MAX_TERMS`] terms, [`MAX_DEGREE`] atoms in a
//! term or [`MAX_LEN`] characters a result is unknown (a crafted graph cannot grow them).
//! Division is exact, or a `floordiv(..)` atom where the operator floors (a window's output
//! size), never rounded silently. Names stand for
//! sizes, so they are never negative (what `max` and `min` rely on).

use std::collections::BTreeMap;

use super::Dim;

/// Most terms an expression keeps.
const MAX_TERMS: usize = 8;
/// Most atoms in one term.
const MAX_DEGREE: usize = 4;
/// Longest text of an expression.
const MAX_LEN: usize = 200;
/// Deepest nesting the parser follows.
const MAX_DEPTH: usize = 8;

/// A polynomial with integer coefficients over atoms: monomial (sorted atom texts) ->
/// coefficient; the empty monomial is the constant. No zero coefficients are stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Poly(BTreeMap<Vec<String>, i64>);

impl Poly {
    pub fn constant(k: i64) -> Poly {
        let mut m = BTreeMap::new();
        if k != 0 {
            m.insert(Vec::new(), k);
        }
        Poly(m)
    }
    fn atom(name: &str) -> Poly {
        let mut m = BTreeMap::new();
        m.insert(vec![name.to_owned()], 1);
        Poly(m)
    }
    /// The value, when the polynomial is a constant.
    pub fn as_constant(&self) -> Option<i64> {
        match self.0.len() {
            0 => Some(0),
            1 => self.0.get(&Vec::new()).copied(),
            _ => None,
        }
    }
    fn add_term(&mut self, mono: Vec<String>, k: i64) -> Option<()> {
        let e = self.0.entry(mono).or_insert(0);
        *e = e.checked_add(k)?;
        self.0.retain(|_, v| *v != 0);
        Some(())
    }
    pub fn add(&self, other: &Poly) -> Option<Poly> {
        let mut out = self.clone();
        for (m, &k) in &other.0 {
            out.add_term(m.clone(), k)?;
        }
        out.checked()
    }
    pub fn scale(&self, k: i64) -> Option<Poly> {
        let mut out = Poly::default();
        for (m, &c) in &self.0 {
            out.add_term(m.clone(), c.checked_mul(k)?)?;
        }
        Some(out)
    }
    pub fn sub(&self, other: &Poly) -> Option<Poly> {
        self.add(&other.scale(-1)?)
    }
    pub fn mul(&self, other: &Poly) -> Option<Poly> {
        let mut out = Poly::default();
        for (a, &x) in &self.0 {
            for (b, &y) in &other.0 {
                let mut m: Vec<String> = a.iter().chain(b).cloned().collect();
                if m.len() > MAX_DEGREE {
                    return None;
                }
                m.sort();
                out.add_term(m, x.checked_mul(y)?)?;
            }
        }
        out.checked()
    }
    /// `self / other` when it divides exactly: by a nonzero constant that divides every
    /// coefficient, or by one term whose atoms every term holds.
    pub fn div_exact(&self, other: &Poly) -> Option<Poly> {
        if other.0.len() != 1 {
            return None;
        }
        let (dm, &dk) = other.0.iter().next()?;
        if dk == 0 {
            return None;
        }
        let mut out = Poly::default();
        for (m, &k) in &self.0 {
            if k % dk != 0 {
                return None;
            }
            let mut rest = m.clone();
            for a in dm {
                let p = rest.iter().position(|x| x == a)?;
                rest.remove(p);
            }
            out.add_term(rest, k / dk)?;
        }
        Some(out)
    }
    fn checked(self) -> Option<Poly> {
        (self.0.len() <= MAX_TERMS).then_some(self)
    }
    /// The canonical text: terms of higher degree first, then by their atoms; the constant
    /// last.
    pub fn text(&self) -> String {
        let mut terms: Vec<(&Vec<String>, i64)> = self.0.iter().map(|(m, &k)| (m, k)).collect();
        terms.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
        let mut s = String::new();
        for (i, (m, k)) in terms.iter().enumerate() {
            let neg = *k < 0;
            let mag = k.unsigned_abs();
            if i == 0 {
                if neg {
                    s.push('-');
                }
            } else {
                s.push_str(if neg { " - " } else { " + " });
            }
            let mut parts: Vec<String> = Vec::new();
            if mag != 1 || m.is_empty() {
                parts.push(mag.to_string());
            }
            parts.extend(m.iter().cloned());
            s.push_str(&parts.join("*"));
        }
        if s.is_empty() {
            s.push('0');
        }
        s
    }
    /// The value at these sizes of the atoms' names.
    pub fn eval(&self, size: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
        let mut total: i64 = 0;
        for (m, &k) in &self.0 {
            let mut t = k;
            for a in m {
                t = t.checked_mul(eval_atom(a, size)?)?;
            }
            total = total.checked_add(t)?;
        }
        Some(total)
    }
    /// The names the polynomial reads (in `max`/`min` atoms too), each once.
    fn names(&self, out: &mut Vec<String>) {
        for m in self.0.keys() {
            for a in m {
                match parse_call(a) {
                    Some((_, x, y)) => {
                        x.names(out);
                        y.names(out);
                    }
                    None => {
                        if !out.iter().any(|n| n == a) {
                            out.push(a.clone());
                        }
                    }
                }
            }
        }
    }
}

fn eval_atom(a: &str, size: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
    match parse_call(a) {
        Some((f, x, y)) => {
            let (x, y) = (x.eval(size)?, y.eval(size)?);
            match f {
                "max" => Some(x.max(y)),
                "min" => Some(x.min(y)),
                _ => (y > 0).then(|| x.div_euclid(y)),
            }
        }
        None => size(a),
    }
}

/// A `max(..)`/`min(..)`/`floordiv(..)` atom's function and arguments.
fn parse_call(a: &str) -> Option<(&'static str, Poly, Poly)> {
    let f = ["max", "min", "floordiv"]
        .into_iter()
        .find(|f| a.strip_prefix(f).is_some_and(|r| r.starts_with('(')))?;
    if !a.ends_with(')') {
        return None;
    }
    let inner = a.get(f.len() + 1..a.len() - 1)?;
    let (x, y) = split_top_comma(inner)?;
    Some((f, parse(x.trim())?, parse(y.trim())?))
}

/// Split `x, y` at the one comma outside parentheses.
fn split_top_comma(s: &str) -> Option<(&str, &str)> {
    let mut depth = 0i32;
    let mut at = None;
    for (i, ch) in s.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 && at.replace(i).is_some() => return None,
            _ => {}
        }
    }
    let i = at?;
    Some((&s[..i], &s[i + 1..]))
}

/// The polynomial of a dimension: a number, or a symbol read as an expression (a plain
/// name is one atom). `None` for an unknown one.
pub(crate) fn of_dim(d: &Dim) -> Option<Poly> {
    match d {
        Dim::Known(k) => Some(Poly::constant(*k)),
        Dim::Sym(s) => Some(parse(s).unwrap_or_else(|| Poly::atom(s))),
        Dim::Unknown => None,
    }
}

/// A polynomial as a value of a shape computation (a constant may be negative).
pub(crate) fn to_value(p: &Poly) -> Dim {
    if let Some(k) = p.as_constant() {
        return Dim::Known(k);
    }
    let t = p.text();
    if t.len() > MAX_LEN {
        return Dim::Unknown;
    }
    Dim::Sym(t.into())
}

fn binary(a: &Dim, b: &Dim, f: impl Fn(&Poly, &Poly) -> Option<Poly>) -> Option<Poly> {
    f(&of_dim(a)?, &of_dim(b)?)
}

/// `a + b` as a value.
pub(crate) fn add(a: &Dim, b: &Dim) -> Dim {
    binary(a, b, Poly::add).map_or(Dim::Unknown, |p| to_value(&p))
}
/// `a - b` as a value.
pub(crate) fn sub(a: &Dim, b: &Dim) -> Dim {
    binary(a, b, Poly::sub).map_or(Dim::Unknown, |p| to_value(&p))
}
/// `a * b` as a value.
pub(crate) fn mul(a: &Dim, b: &Dim) -> Dim {
    // Zero times anything, even an unknown, is zero.
    if matches!(a, Dim::Known(0)) || matches!(b, Dim::Known(0)) {
        return Dim::Known(0);
    }
    binary(a, b, Poly::mul).map_or(Dim::Unknown, |p| to_value(&p))
}
/// `a / b` when it divides exactly (so truncating and flooring agree), as a value.
pub(crate) fn div_exact(a: &Dim, b: &Dim) -> Dim {
    binary(a, b, Poly::div_exact).map_or(Dim::Unknown, |p| to_value(&p))
}

/// `floor(a / k)` for `k > 0`, as a value: the terms `k` divides are divided, the rest
/// (when not a number) stays a `floordiv(rest, k)` atom (`floordiv(H + 1, 2)`).
pub(crate) fn floor_div(a: &Dim, k: i64) -> Dim {
    of_dim(a)
        .and_then(|p| floor_div_poly(&p, k))
        .map_or(Dim::Unknown, |p| to_value(&p))
}

fn floor_div_poly(p: &Poly, k: i64) -> Option<Poly> {
    if k <= 0 {
        return None;
    }
    let mut q = Poly::default();
    let mut rest = Poly::default();
    for (m, &c) in &p.0 {
        if c % k == 0 {
            q.add_term(m.clone(), c / k)?;
        } else {
            rest.add_term(m.clone(), c)?;
        }
    }
    if let Some(r) = rest.as_constant() {
        return q.add(&Poly::constant(r.div_euclid(k)));
    }
    let atom = format!("floordiv({}, {k})", rest.text());
    if atom.len() > MAX_LEN {
        return None;
    }
    q.add(&Poly::atom(&atom))
}

/// `max(a, b)` / `min(a, b)` of two values: decided when their difference is a constant,
/// else a `max(..)` atom (arguments in canonical order).
pub(crate) fn max(a: &Dim, b: &Dim) -> Dim {
    extreme(a, b, true)
}
pub(crate) fn min(a: &Dim, b: &Dim) -> Dim {
    extreme(a, b, false)
}

fn extreme(a: &Dim, b: &Dim, is_max: bool) -> Dim {
    let (Some(x), Some(y)) = (of_dim(a), of_dim(b)) else {
        return Dim::Unknown;
    };
    // Names are sizes (never negative): a difference whose coefficients share a sign has
    // that sign (`past + seq` is at least `past`).
    if let Some(d) = x.sub(&y) {
        let nonneg = d.0.values().all(|&k| k >= 0);
        let nonpos = d.0.values().all(|&k| k <= 0);
        if nonneg || nonpos {
            return if nonneg == is_max {
                to_value(&x)
            } else {
                to_value(&y)
            };
        }
    }
    let (mut s, mut t) = (x.text(), y.text());
    if s > t {
        std::mem::swap(&mut s, &mut t);
    }
    let f = if is_max { "max" } else { "min" };
    let atom = format!("{f}({s}, {t})");
    if atom.len() > MAX_LEN {
        return Dim::Unknown;
    }
    Dim::Sym(atom.into())
}

/// The value of a dimension at the given sizes of its names (a number is itself; an
/// expression is computed; `None` when a name has no size or the result is negative).
pub fn eval(d: &Dim, size: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
    let v = match d {
        Dim::Known(k) => *k,
        Dim::Sym(s) => match parse(s) {
            Some(p) => p.eval(size)?,
            None => size(s)?,
        },
        Dim::Unknown => return None,
    };
    (v >= 0).then_some(v)
}

/// The names a dimension's size depends on (a plain name is itself), each once.
pub fn names(d: &Dim) -> Vec<String> {
    let mut out = Vec::new();
    if let Dim::Sym(s) = d {
        match parse(s) {
            Some(p) => p.names(&mut out),
            None => out.push(s.to_string()),
        }
    }
    out
}

// --- Parsing -------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok<'a> {
    Num(i64),
    Name(&'a str),
    Plus,
    Minus,
    Star,
    Open,
    Close,
    Comma,
}

/// Tokens of an expression text: `+`/`-` are operators only with a space on both sides (or
/// a leading `-`), `*`, parentheses and commas always; anything else runs into a name.
fn tokens(s: &str) -> Option<Vec<Tok<'_>>> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let ch = b[i];
        let spaced =
            |j: usize| (j == 0 || b[j - 1] == b' ') && b.get(j + 1).is_none_or(|&c| c == b' ');
        match ch {
            b' ' => i += 1,
            b'*' => {
                out.push(Tok::Star);
                i += 1;
            }
            b'(' => {
                out.push(Tok::Open);
                i += 1;
            }
            b')' => {
                out.push(Tok::Close);
                i += 1;
            }
            b',' => {
                out.push(Tok::Comma);
                i += 1;
            }
            b'+' if spaced(i) => {
                out.push(Tok::Plus);
                i += 1;
            }
            // A leading minus (`-a`, `-2*a`) or a spaced one.
            b'-' if spaced(i)
                || (out.is_empty() && i == 0)
                || matches!(out.last(), Some(Tok::Open | Tok::Comma)) =>
            {
                out.push(Tok::Minus);
                i += 1;
            }
            _ => {
                let start = i;
                while i < b.len() && !matches!(b[i], b' ' | b'*' | b'(' | b')' | b',') {
                    i += 1;
                }
                let w = &s[start..i];
                if w.bytes().all(|c| c.is_ascii_digit()) {
                    out.push(Tok::Num(w.parse().ok()?));
                } else if w.as_bytes()[0].is_ascii_digit() {
                    return None;
                } else {
                    out.push(Tok::Name(w));
                }
            }
        }
    }
    Some(out)
}

/// Parse an expression text whole (`None` when it is not one: the text is then a name).
/// A lone name parses to that atom; only texts with an operator or a call are expressions.
fn parse(s: &str) -> Option<Poly> {
    if s.len() > MAX_LEN {
        return None;
    }
    let toks = tokens(s)?;
    if toks.len() <= 1 {
        return match toks.as_slice() {
            [Tok::Num(k)] => Some(Poly::constant(*k)),
            [Tok::Name(n)] if *n == s => Some(Poly::atom(n)),
            _ => None,
        };
    }
    let mut p = Parser {
        toks,
        at: 0,
        depth: 0,
    };
    let e = p.expr()?;
    (p.at == p.toks.len()).then_some(e)
}

struct Parser<'a> {
    toks: Vec<Tok<'a>>,
    at: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Tok<'a>> {
        self.toks.get(self.at).cloned()
    }
    fn eat(&mut self, t: &Tok<'_>) -> bool {
        if self.peek().as_ref() == Some(t) {
            self.at += 1;
            true
        } else {
            false
        }
    }
    fn expr(&mut self) -> Option<Poly> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        let mut acc = if self.eat(&Tok::Minus) {
            self.term()?.scale(-1)?
        } else {
            self.term()?
        };
        loop {
            if self.eat(&Tok::Plus) {
                acc = acc.add(&self.term()?)?;
            } else if self.eat(&Tok::Minus) {
                acc = acc.sub(&self.term()?)?;
            } else {
                break;
            }
        }
        self.depth -= 1;
        Some(acc)
    }
    fn term(&mut self) -> Option<Poly> {
        let mut acc = self.factor()?;
        while self.eat(&Tok::Star) {
            acc = acc.mul(&self.factor()?)?;
        }
        Some(acc)
    }
    fn factor(&mut self) -> Option<Poly> {
        match self.peek()? {
            Tok::Num(k) => {
                self.at += 1;
                Some(Poly::constant(k))
            }
            Tok::Open => {
                self.at += 1;
                let e = self.expr()?;
                self.eat(&Tok::Close).then_some(e)
            }
            Tok::Name(n) if self.toks.get(self.at + 1) == Some(&Tok::Open) => {
                let is_max = match n {
                    "max" => true,
                    "min" => false,
                    "floordiv" => {
                        self.at += 2;
                        let x = self.expr()?;
                        if !self.eat(&Tok::Comma) {
                            return None;
                        }
                        let k = self.expr()?.as_constant()?;
                        if !self.eat(&Tok::Close) {
                            return None;
                        }
                        return floor_div_poly(&x, k);
                    }
                    _ => return None,
                };
                self.at += 2;
                let x = self.expr()?;
                if !self.eat(&Tok::Comma) {
                    return None;
                }
                let y = self.expr()?;
                if !self.eat(&Tok::Close) {
                    return None;
                }
                match extreme(&to_value(&x), &to_value(&y), is_max) {
                    Dim::Known(k) => Some(Poly::constant(k)),
                    Dim::Sym(s) if s.starts_with("max(") || s.starts_with("min(") => {
                        Some(Poly::atom(&s))
                    }
                    Dim::Sym(s) => parse(&s),
                    Dim::Unknown => None,
                }
            }
            Tok::Name(n) => {
                self.at += 1;
                Some(Poly::atom(n))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Dim {
        Dim::Sym(x.into())
    }

    #[test]
    fn sums_products_and_their_text() {
        let past = s("past_sequence_length");
        let seq = s("sequence_length");
        let total = add(&past, &seq);
        assert_eq!(total, s("past_sequence_length + sequence_length"));
        // Commutative: the same text either way.
        assert_eq!(add(&seq, &past), total);
        assert_eq!(sub(&total, &seq), past);
        assert_eq!(sub(&total, &total), Dim::Known(0));
        assert_eq!(mul(&Dim::Known(2), &s("batch")), s("2*batch"));
        assert_eq!(mul(&s("b"), &s("a")), s("a*b"));
        assert_eq!(add(&s("a"), &Dim::Known(-1)), s("a - 1"));
        assert_eq!(sub(&Dim::Known(0), &s("a")), s("-a"));
        assert_eq!(div_exact(&s("2*batch"), &Dim::Known(2)), s("batch"));
        assert_eq!(div_exact(&s("a*b*c"), &s("b")), s("a*c"));
        assert_eq!(div_exact(&s("a + 1"), &Dim::Known(2)), Dim::Unknown);
        assert_eq!(div_exact(&s("a"), &Dim::Known(0)), Dim::Unknown);
        assert_eq!(add(&Dim::Unknown, &s("a")), Dim::Unknown);
        assert_eq!(mul(&Dim::Unknown, &Dim::Known(0)), Dim::Known(0));
    }

    #[test]
    fn names_with_dashes_stay_names() {
        assert_eq!(of_dim(&s("seq-len")), Some(Poly::atom("seq-len")));
        assert_eq!(add(&s("seq-len"), &Dim::Known(1)), s("seq-len + 1"));
        assert_eq!(sub(&s("seq-len + 1"), &Dim::Known(1)), s("seq-len"));
        // A name with a space that is no expression stays one atom.
        assert_eq!(add(&s("batch size"), &Dim::Known(0)), s("batch size"));
        // Digits first: not a name, not an expression.
        assert_eq!(names(&s("3a")), vec!["3a".to_string()]);
    }

    #[test]
    fn max_and_min() {
        let p = s("past");
        let t = add(&p, &s("seq"));
        assert_eq!(max(&p, &t), t);
        assert_eq!(min(&p, &t), p);
        let m = max(&s("total"), &s("past"));
        assert_eq!(m, s("max(past, total)"));
        assert_eq!(max(&s("past"), &s("total")), m);
        let size = |n: &str| match n {
            "past" => Some(5),
            "total" => Some(9),
            "seq" => Some(4),
            _ => None,
        };
        assert_eq!(eval(&m, &size), Some(9));
        assert_eq!(eval(&add(&m, &Dim::Known(1)), &size), Some(10));
        assert_eq!(eval(&t, &size), Some(9));
        assert_eq!(eval(&s("nobody"), &size), None);
        assert_eq!(eval(&sub(&p, &s("total")), &size), None);
        let mut n = names(&add(&m, &s("seq")));
        n.sort();
        assert_eq!(n, vec!["past", "seq", "total"]);
    }

    #[test]
    fn floor_division() {
        let h = s("H");
        // A stride-2 window of 3 with one pad each side: floor((H + 2 - 3) / 2) + 1.
        let x = add(&floor_div(&add(&h, &Dim::Known(1)), 2), &Dim::Known(0));
        assert_eq!(x, s("floordiv(H + 1, 2)"));
        assert_eq!(floor_div(&s("2*H + 3"), 2), s("H + 1"));
        assert_eq!(floor_div(&Dim::Known(-3), 2), Dim::Known(-2));
        let y = floor_div(&add(&x, &Dim::Known(1)), 2);
        assert_eq!(y, s("floordiv(floordiv(H + 1, 2) + 1, 2)"));
        let size = |n: &str| (n == "H").then_some(9);
        assert_eq!(eval(&x, &size), Some(5));
        assert_eq!(eval(&y, &size), Some(3));
        assert_eq!(names(&y), vec!["H".to_string()]);
        // The text reads back to the same value.
        assert_eq!(add(&y, &Dim::Known(0)), y);
        assert_eq!(floor_div(&h, 0), Dim::Unknown);
    }

    #[test]
    fn growth_is_bounded() {
        let mut d = s("a0");
        for i in 1..20 {
            d = add(&d, &s(&format!("a{i}")));
        }
        assert_eq!(d, Dim::Unknown);
        let mut d = s("x");
        for _ in 0..6 {
            d = mul(&d, &d.clone());
        }
        assert_eq!(d, Dim::Unknown);
        let deep = format!("{}x{}", "(".repeat(50), ")".repeat(50));
        assert_eq!(names(&s(&deep)), vec![deep.clone()]);
        assert_eq!(eval(&s(&deep), &|_| Some(1)), Some(1));
    }
}
