//! YAML → a small tree whose every node knows where it was written (line, column, length).
//!
//! The rule files are read in two steps: serde-saphyr parses the text into this tree (syntax
//! errors stop there, one per file), then `schema` walks the tree and reports *every* semantic
//! error with its place. Parsing into typed structs directly would stop at the first error.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};

/// Where a node was written: a file of the [`super::diag::Sources`] table, 1-based line and
/// column (in characters), and the length of the text in characters (0 for collections).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Loc {
    pub file: u32,
    pub line: u32,
    pub col: u32,
    pub len: u32,
    /// Byte range of the text in the file, when known.
    pub byte: Option<(usize, usize)>,
}

/// A YAML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

/// A YAML value and its place.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub loc: Loc,
}

impl Node {
    /// What kind of value this is, for "expected X, found Y" messages.
    pub fn kind(&self) -> &'static str {
        match &self.value {
            Value::Null => "nothing (null)",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a map",
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_map(&self) -> Option<&[(Node, Node)]> {
        match &self.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }
    /// The node as an f64, for integers and floats.
    pub fn as_f64(&self) -> Option<f64> {
        match self.value {
            Value::Int(i) => Some(i as f64),
            Value::Float(f) => Some(f),
            _ => None,
        }
    }
}

/// The raw tree serde builds, before locations are attached.
#[derive(Debug)]
enum Raw {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Raw>>),
    Map(Vec<(Spanned<Raw>, Spanned<Raw>)>),
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_unit<E>(self) -> Result<Raw, E> {
        Ok(Raw::Null)
    }
    fn visit_none<E>(self) -> Result<Raw, E> {
        Ok(Raw::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
        d.deserialize_any(RawVisitor)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Raw, E> {
        Ok(Raw::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Raw, E> {
        Ok(Raw::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Raw, E> {
        Ok(i64::try_from(v).map_or(Raw::Float(v as f64), Raw::Int))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Raw, E> {
        Ok(i64::try_from(v).map_or(Raw::Float(v as f64), Raw::Int))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Raw, E> {
        Ok(i64::try_from(v).map_or(Raw::Float(v as f64), Raw::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Raw, E> {
        Ok(Raw::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Raw, E> {
        Ok(Raw::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Raw, A::Error> {
        let mut v = Vec::new();
        while let Some(x) = a.next_element()? {
            v.push(x);
        }
        Ok(Raw::Seq(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Raw, A::Error> {
        let mut v = Vec::new();
        while let Some(x) = a.next_entry()? {
            v.push(x);
        }
        Ok(Raw::Map(v))
    }
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Raw, D::Error> {
        d.deserialize_any(RawVisitor)
    }
}

/// A YAML syntax error: its message (without place) and place.
#[derive(Debug, Clone)]
pub struct SyntaxError {
    pub message: String,
    pub loc: Loc,
}

/// Parse one YAML document. YAML 1.2 booleans only (`yes`, `no`, `on`, `off`, `y`, `n` are
/// strings, so a dimension named `N` stays a name); duplicate keys are errors.
pub fn parse(file: u32, text: &str) -> Result<Node, SyntaxError> {
    if text.trim().is_empty() {
        return Ok(Node {
            value: Value::Null,
            loc: Loc {
                file,
                line: 1,
                col: 1,
                ..Loc::default()
            },
        });
    }
    let options = serde_saphyr::options! {
        strict_booleans: true,
        with_snippet: false,
    };
    match serde_saphyr::from_str_with_options::<Spanned<Raw>>(text, options) {
        Ok(raw) => Ok(convert(file, raw)),
        Err(e) => {
            let message = {
                use serde_saphyr::MessageFormatter;
                let m = serde_saphyr::DefaultMessageFormatter.format_message(e.without_snippet());
                // One line, no control characters.
                m.chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect::<String>()
            };
            let loc = e.location().map(|l| loc_of(file, &l)).unwrap_or(Loc {
                file,
                line: 1,
                col: 1,
                ..Loc::default()
            });
            Err(SyntaxError { message, loc })
        }
    }
}

fn loc_of(file: u32, l: &Location) -> Loc {
    let span = l.span();
    let byte = match (span.byte_offset(), span.byte_len()) {
        (Some(o), Some(n)) => usize::try_from(o)
            .ok()
            .zip(usize::try_from(n).ok())
            .filter(|(o, _)| *o != u32::MAX as usize),
        _ => None,
    };
    Loc {
        file,
        line: u32::try_from(l.line()).unwrap_or(u32::MAX).max(1),
        col: u32::try_from(l.column()).unwrap_or(u32::MAX).max(1),
        len: u32::try_from(span.len()).unwrap_or(0),
        byte,
    }
}

fn convert(file: u32, s: Spanned<Raw>) -> Node {
    let loc = loc_of(file, &s.referenced);
    let value = match s.value {
        Raw::Null => Value::Null,
        Raw::Bool(b) => Value::Bool(b),
        Raw::Int(i) => Value::Int(i),
        Raw::Float(f) => Value::Float(f),
        Raw::Str(s) => Value::Str(s),
        Raw::Seq(v) => Value::Seq(v.into_iter().map(|x| convert(file, x)).collect()),
        Raw::Map(m) => Value::Map(
            m.into_iter()
                .map(|(k, v)| (convert(file, k), convert(file, v)))
                .collect(),
        ),
    };
    Node { value, loc }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_and_scalars() {
        let src =
            "target: rx\nrules:\n  - id: a\n    match: {op: [Conv, Add], n: N, w: 1e9, b: no}\n";
        let root = parse(0, src).unwrap();
        let m = root.as_map().unwrap();
        assert_eq!(m[0].0.as_str(), Some("target"));
        assert_eq!((m[1].0.loc.line, m[1].0.loc.col), (2, 1));
        let Value::Seq(rules) = &m[1].1.value else {
            panic!()
        };
        let rule = rules[0].as_map().unwrap();
        let pat = rule[1].1.as_map().unwrap();
        assert_eq!(pat[0].0.as_str(), Some("op"));
        assert_eq!((pat[0].0.loc.line, pat[0].0.loc.col), (4, 13));
        assert_eq!(pat[1].1.as_str(), Some("N"));
        assert_eq!(pat[2].1.value, Value::Float(1e9));
        assert_eq!(pat[3].1.as_str(), Some("no"));
    }

    #[test]
    fn syntax_error_has_place() {
        let e = parse(0, "a: [1, 2\nb: c\n").unwrap_err();
        assert_eq!(e.loc.line, 2);
        assert!(!e.message.contains('\n'));
        let e = parse(0, "a: 1\na: 2\n").unwrap_err();
        assert_eq!((e.loc.line, e.loc.col), (2, 1));
        assert!(e.message.contains("duplicate"), "{}", e.message);
    }
}
