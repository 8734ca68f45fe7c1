//! What an execution provider registers: its kernels by domain, op, since-version range and
//! element types, with the inputs and outputs each kernel wants in CPU memory. The tables are
//! generated from the runtime's own sources by `tools/capability/generate.py` into
//! `runtimes/capability/<provider>.tsv` and embedded here; `runtimes/schemas.tsv` (from
//! `tools/capability/schemas.py`) gives each operator's since-versions.
//!
//! Kernel lookup follows ONNX Runtime (`kernel_registry.cc`, `VerifyVersion`): a node's schema
//! since-version is the largest since-version of its op that is at most the model's opset for
//! its domain; a versioned registration `[a, b]` takes it when `a <= since <= b`, an
//! open-ended one `a+` only when `since == a`. A kernel's type constraints are checked against
//! the node's input and output element types where the analysis knows them.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::tensor::dtype_from_name;

/// One kernel registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub since: i64,
    /// The last version it covers (`None`: open-ended).
    pub until: Option<i64>,
    /// Per formal input: a type constraint name, or a literal element type.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// Constraint name → allowed element types (`None`: any).
    pub types: HashMap<String, Option<Vec<i32>>>,
    pub cpu_inputs: Vec<usize>,
    pub cpu_outputs: Vec<usize>,
}

impl Kernel {
    /// Whether this registration serves a node whose schema since-version is `since`.
    pub fn serves(&self, since: i64) -> bool {
        match self.until {
            Some(u) => self.since <= since && since <= u,
            None => self.since == since,
        }
    }

    fn allowed(&self, formal: &str, dtype: i32) -> bool {
        if formal == "*" || formal.is_empty() {
            return true;
        }
        let formal = formal
            .strip_prefix("tensor(")
            .map_or(formal, |f| f.trim_end_matches(')'));
        match self.types.get(formal) {
            Some(None) => true,
            Some(Some(list)) => list.contains(&dtype),
            // A literal type (`int64`), or a constraint the table does not list.
            None => match dtype_from_name(formal) {
                Some(t) => t == dtype,
                None => true,
            },
        }
    }

    /// The first of `dtypes` (inputs, then outputs; `None` unknown) that the kernel's type
    /// constraints reject: `(is_output, index, dtype)`.
    pub fn rejects(
        &self,
        schema: Option<&SchemaVersion>,
        inputs: &[Option<i32>],
        outputs: &[Option<i32>],
    ) -> Option<(bool, usize, i32)> {
        // The schema's formals name the constraints; the table's own are a fallback (its
        // source may list another version's signature).
        let (fin, fout) = match schema {
            Some(s) => (&s.inputs, &s.outputs),
            None => (&self.inputs, &self.outputs),
        };
        let formal = |list: &[String], i: usize| -> String {
            list.get(i)
                .or_else(|| list.last())
                .cloned()
                .unwrap_or_default()
        };
        for (i, t) in inputs.iter().enumerate() {
            if let Some(t) = *t {
                if !self.allowed(&formal(fin, i), t) {
                    return Some((false, i, t));
                }
            }
        }
        for (i, t) in outputs.iter().enumerate() {
            if let Some(t) = *t {
                if !self.allowed(&formal(fout, i), t) {
                    return Some((true, i, t));
                }
            }
        }
        None
    }
}

/// A provider's table.
#[derive(Debug, Clone, Default)]
pub struct Capability {
    /// ONNX Runtime's name for it (`DmlExecutionProvider`).
    pub provider: String,
    /// The runtime and version the table was generated from.
    pub runtime: String,
    /// Where it was generated from (repository, commit, files).
    pub source: String,
    kernels: HashMap<(String, String), Vec<Kernel>>,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<'a> {
    Kernel(&'a Kernel),
    /// The provider has no kernel of this op in this domain.
    NoOp,
    /// It has the op, but no registration for this since-version (the ranges it has).
    NoVersion(Vec<(i64, Option<i64>)>),
    /// A registration for the version, but not for this element type.
    NoType {
        output: bool,
        index: usize,
        dtype: i32,
    },
}

/// The canonical domain name (`ai.onnx` for the default domain).
pub fn domain_key(d: &str) -> &str {
    if d.is_empty() || d == "ai.onnx" {
        "ai.onnx"
    } else {
        d
    }
}

fn type_id(name: &str) -> Option<i32> {
    dtype_from_name(
        name.strip_prefix("tensor(")
            .map_or(name, |s| s.trim_end_matches(')')),
    )
}

impl Capability {
    /// Parses a table (the TSV format `tools/capability/generate.py` writes).
    pub fn parse(text: &str) -> Result<Capability, String> {
        let mut cap = Capability::default();
        let mut header_seen = false;
        for (ln, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if let Some(c) = line.strip_prefix('#') {
                let c = c.trim();
                if let Some(v) = c.strip_prefix("provider:") {
                    cap.provider = v.trim().to_string();
                } else if let Some(v) = c.strip_prefix("runtime:") {
                    cap.runtime = v.trim().to_string();
                } else if let Some(v) = c.strip_prefix("source:") {
                    cap.source = v.trim().to_string();
                }
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            if !header_seen {
                header_seen = true;
                if line.starts_with("domain\t") {
                    continue;
                }
            }
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() < 4 {
                return Err(format!("line {}: {} fields, expected 9", ln + 1, f.len()));
            }
            let get = |i: usize| f.get(i).copied().unwrap_or("-");
            let num = |s: &str| -> Result<i64, String> {
                s.parse::<i64>()
                    .map_err(|_| format!("line {}: `{s}` is not a version", ln + 1))
            };
            let list = |s: &str| -> Vec<String> {
                if s == "-" || s.is_empty() {
                    Vec::new()
                } else {
                    s.split(',').map(|x| x.trim().to_string()).collect()
                }
            };
            let idx =
                |s: &str| -> Vec<usize> { list(s).iter().filter_map(|x| x.parse().ok()).collect() };
            let mut types = HashMap::new();
            let t = get(6);
            if t != "-" && !t.is_empty() {
                for c in t.split(';') {
                    let Some((name, vals)) = c.split_once('=') else {
                        continue;
                    };
                    let vals = vals.trim();
                    let set = if vals == "*" {
                        None
                    } else {
                        let mut ids: Vec<i32> =
                            vals.split(',').filter_map(|v| type_id(v.trim())).collect();
                        ids.sort_unstable();
                        Some(ids)
                    };
                    types.insert(name.trim().to_string(), set);
                }
            }
            let until = match get(3) {
                "-" | "" => None,
                s => Some(num(s)?),
            };
            let k = Kernel {
                since: num(get(2))?,
                until,
                inputs: list(get(4)),
                outputs: list(get(5)),
                types,
                cpu_inputs: idx(get(7)),
                cpu_outputs: idx(get(8)),
            };
            cap.kernels
                .entry((domain_key(get(0)).to_string(), get(1).to_string()))
                .or_default()
                .push(k);
        }
        Ok(cap)
    }

    /// The registrations of `op` in `domain`.
    pub fn kernels(&self, domain: &str, op: &str) -> &[Kernel] {
        self.kernels
            .get(&(domain_key(domain).to_string(), op.to_string()))
            .map_or(&[], |v| v.as_slice())
    }

    /// Whether the provider registers `op` at all.
    pub fn has_op(&self, domain: &str, op: &str) -> bool {
        !self.kernels(domain, op).is_empty()
    }

    /// The kernel for a node of `op` whose schema since-version is `since`, with these element
    /// types (`None`: unknown, accepted).
    pub fn lookup(
        &self,
        domain: &str,
        op: &str,
        since: i64,
        inputs: &[Option<i32>],
        outputs: &[Option<i32>],
    ) -> Lookup<'_> {
        let ks = self.kernels(domain, op);
        if ks.is_empty() {
            return Lookup::NoOp;
        }
        let schema = Schemas::builtin().at(domain, op, since);
        let mut rejected = None;
        for k in ks.iter().filter(|k| k.serves(since)) {
            match k.rejects(schema, inputs, outputs) {
                None => return Lookup::Kernel(k),
                Some((output, index, dtype)) => {
                    rejected.get_or_insert(Lookup::NoType {
                        output,
                        index,
                        dtype,
                    });
                }
            }
        }
        rejected
            .unwrap_or_else(|| Lookup::NoVersion(ks.iter().map(|k| (k.since, k.until)).collect()))
    }

    /// Number of registrations.
    pub fn len(&self) -> usize {
        self.kernels.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }
}

/// `13+`, `[6, 12]`, `13`.
pub fn range_text(since: i64, until: Option<i64>) -> String {
    match until {
        None => format!("{since}+"),
        Some(u) if u == since => format!("{since}"),
        Some(u) => format!("[{since}, {u}]"),
    }
}

/// One schema version: its formal inputs' and outputs' types (constraint names or literal
/// types; the last repeats for a variadic formal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaVersion {
    pub since: i64,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// The schema's function body, which ONNX Runtime inlines when no provider registers the
    /// op.
    pub function: Function,
}

/// A schema's function body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Function {
    None,
    /// The op types of the body (default domain).
    Ops(Vec<String>),
    /// A body built for each node (a context-dependent function).
    Dynamic,
}

/// Operator schemas by since-version (`runtimes/schemas.tsv`).
pub struct Schemas {
    map: HashMap<(String, String), Vec<SchemaVersion>>,
}

impl Schemas {
    pub fn parse(text: &str) -> Schemas {
        let mut map: HashMap<(String, String), Vec<SchemaVersion>> = HashMap::new();
        let list = |s: &str| -> Vec<String> {
            if s == "-" || s.is_empty() {
                Vec::new()
            } else {
                s.split(',').map(|x| x.trim().to_string()).collect()
            }
        };
        for line in text.lines() {
            if line.starts_with('#') || line.starts_with("domain\t") || line.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() < 3 {
                continue;
            }
            let Ok(since) = f[2].trim().parse::<i64>() else {
                continue;
            };
            map.entry((domain_key(f[0]).to_string(), f[1].to_string()))
                .or_default()
                .push(SchemaVersion {
                    since,
                    inputs: list(f.get(3).copied().unwrap_or("-")),
                    outputs: list(f.get(4).copied().unwrap_or("-")),
                    function: match f.get(5).copied().unwrap_or("-") {
                        "-" | "" => Function::None,
                        "?" => Function::Dynamic,
                        ops => Function::Ops(list(ops)),
                    },
                });
        }
        for v in map.values_mut() {
            v.sort_by_key(|s| s.since);
        }
        Schemas { map }
    }

    /// The built-in table.
    pub fn builtin() -> &'static Schemas {
        static S: OnceLock<Schemas> = OnceLock::new();
        S.get_or_init(|| Schemas::parse(include_str!("../../runtimes/schemas.tsv")))
    }

    /// The schema of `op` in force at `opset` (`None`: no such schema at that opset).
    pub fn at(&self, domain: &str, op: &str, opset: i64) -> Option<&SchemaVersion> {
        self.map
            .get(&(domain_key(domain).to_string(), op.to_string()))?
            .iter()
            .rev()
            .find(|v| v.since <= opset)
    }

    /// The since-version of `op`'s schema at `opset`.
    pub fn since(&self, domain: &str, op: &str, opset: i64) -> Option<i64> {
        self.at(domain, op, opset).map(|v| v.since)
    }

    /// Whether the table knows `op` in `domain` at all.
    pub fn knows(&self, domain: &str, op: &str) -> bool {
        self.map
            .contains_key(&(domain_key(domain).to_string(), op.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# provider: TestExecutionProvider\n# runtime: onnxruntime 0.0\n# source: test\ndomain\top\tsince\tuntil\tinputs\toutputs\ttypes\tcpu_inputs\tcpu_outputs\nai.onnx\tScatterND\t11\t12\tT,int64,T\tT\tT=*\t-\t-\nai.onnx\tScatterND\t13\t15\tT,int64,T\tT\tT=*\t-\t-\nai.onnx\tScatterND\t16\t-\tT,int64,T\tT\tT=*\t-\t-\nai.onnx\tReshape\t14\t-\tT,int64\tT\tT=float,float16\t1\t-\nai.onnx\tShape\t15\t-\tT\tint64\tT=*\t-\t0\n";

    #[test]
    fn open_ended_only_at_its_start() {
        let c = Capability::parse(SAMPLE).unwrap();
        assert_eq!(c.provider, "TestExecutionProvider");
        assert!(matches!(
            c.lookup("", "ScatterND", 16, &[], &[]),
            Lookup::Kernel(_)
        ));
        assert!(matches!(
            c.lookup("", "ScatterND", 12, &[], &[]),
            Lookup::Kernel(_)
        ));
        assert!(matches!(
            c.lookup("", "ScatterND", 18, &[], &[]),
            Lookup::NoVersion(_)
        ));
        assert_eq!(c.lookup("", "HardSwish", 14, &[], &[]), Lookup::NoOp);
    }

    #[test]
    fn types_are_checked() {
        let c = Capability::parse(SAMPLE).unwrap();
        let f = Some(1);
        let d = Some(11);
        let i64t = Some(7);
        assert!(
            matches!(c.lookup("", "Reshape", 14, &[f, i64t], &[f]), Lookup::Kernel(k) if k.cpu_inputs == vec![1])
        );
        assert!(matches!(
            c.lookup("", "Reshape", 14, &[d, i64t], &[d]),
            Lookup::NoType {
                output: false,
                index: 0,
                dtype: 11
            }
        ));
        // A literal formal: int64 shape only.
        assert!(matches!(
            c.lookup("", "Reshape", 14, &[f, Some(6)], &[f]),
            Lookup::NoType {
                output: false,
                index: 1,
                ..
            }
        ));
        // Unknown types are accepted.
        assert!(matches!(
            c.lookup("", "Reshape", 14, &[None, None], &[None]),
            Lookup::Kernel(_)
        ));
    }

    #[test]
    fn schema_since_versions() {
        let s = Schemas::builtin();
        assert_eq!(s.since("", "HardSwish", 17), Some(14));
        assert_eq!(s.since("", "HardSwish", 13), None);
        assert_eq!(s.since("", "ScatterND", 21), Some(18));
        assert_eq!(s.since("com.microsoft", "FusedConv", 1), Some(1));
        assert_eq!(s.since("ai.onnx", "Shape", 23), Some(23));
    }
}
