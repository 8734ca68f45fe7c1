//! Loading a target: read its file, check it, resolve its `extends` chain (built-in names and
//! relative paths), apply `--rules` files on top, and report every error of every file at once.
//!
//! Inheritance: a file's bases are resolved first, in the order `extends` lists them, then the
//! file's own layer is applied:
//! 1. `disable: [id, ...]` removes rules of the bases (naming an id no base has is an error);
//! 2. a rule whose id is already there **replaces** that rule in place (same position in the
//!    order, the new rule's match, action and priority) — this is how a derived target tunes a
//!    threshold; within one file ids must be unique;
//! 3. other rules are appended;
//! 4. runtime settings with an existing key replace its value in place; new keys are appended.
//!
//! `none` is the empty base. A cycle is an error that names the whole chain.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use super::builtin::{builtin, builtin_display, builtin_names};
use super::diag::{Diagnostic, RuleErrors, Sources};
use super::ops::suggest;
use super::parse::{parse_file, FileDoc, Mode};
use super::pattern::SourceLoc;
use super::schema::{Rule, RuntimeSetting, Target};
use super::yaml::{self, Loc};

/// Where rule files are read from (the real file system, or memory in tests).
pub trait RuleFs {
    fn read(&self, path: &Path) -> std::io::Result<String>;
    /// A key that is the same for every spelling of the same file (for cycle detection).
    fn canonical(&self, path: &Path) -> PathBuf {
        normalize(path)
    }
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct StdFs;

impl RuleFs for StdFs {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
    fn canonical(&self, path: &Path) -> PathBuf {
        std::fs::canonicalize(path).unwrap_or_else(|_| normalize(path))
    }
}

/// Rule files held in memory, by (normalised, relative) path.
#[derive(Debug, Clone, Default)]
pub struct MemFs {
    files: BTreeMap<PathBuf, String>,
}

impl MemFs {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn with(mut self, path: &str, text: &str) -> Self {
        self.files
            .insert(normalize(Path::new(path)), text.to_string());
        self
    }
}

impl RuleFs for MemFs {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        self.files
            .get(&normalize(path))
            .cloned()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"))
    }
}

/// Remove `.` and resolve `..` without touching the file system.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Whether an `extends` entry or `--target` value names a file rather than a built-in.
fn looks_like_path(s: &str) -> bool {
    s.contains('/') || s.contains('\\') || s.ends_with(".yaml") || s.ends_with(".yml")
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Builtin(&'static str),
    File(PathBuf),
}

#[derive(Debug, Clone)]
struct Loaded {
    doc: Rc<FileDoc>,
    /// The file's path as shown (for relative `extends` and messages); `None` for built-ins.
    path: Option<PathBuf>,
}

/// Rules and settings accumulated along a chain.
#[derive(Debug, Default, Clone)]
struct Acc {
    rules: Vec<Rule>,
    runtime: Vec<RuntimeSetting>,
    fallback: Option<crate::rules::schema::Fallback>,
    approximate: Option<bool>,
    provider: Option<String>,
    cpu_subgraphs: Option<crate::rules::schema::CpuSubgraphs>,
    device: crate::rules::schema::DeviceSpec,
    chain: Vec<String>,
    /// Every file of the chain was read and checked without error.
    ok: bool,
}

/// Loads targets and rule files, collecting every error.
pub struct Loader<'f> {
    fs: &'f dyn RuleFs,
    sources: Sources,
    errs: RuleErrors,
    cache: HashMap<Key, Option<Loaded>>,
    /// Files whose whole `extends` tree has been resolved: a base reached again through
    /// another path (a diamond) is not resolved again, which would take time exponential in
    /// the depth of the diamonds.
    resolved: HashMap<Key, (Loaded, Acc)>,
}

impl<'f> Loader<'f> {
    pub fn new(fs: &'f dyn RuleFs) -> Self {
        Loader {
            fs,
            sources: Sources::default(),
            errs: RuleErrors::default(),
            cache: HashMap::new(),
            resolved: HashMap::new(),
        }
    }

    /// Load a target by built-in name or file path, then apply `rules` files on top.
    pub fn load(mut self, spec: &str, rules: &[PathBuf]) -> Result<Target, RuleErrors> {
        let key = if let Some(name) = builtin_names().into_iter().find(|n| *n == spec) {
            Some((Key::Builtin(name), builtin_display(name)))
        } else {
            let path = PathBuf::from(spec);
            if !looks_like_path(spec) && self.fs.read(&path).is_err() {
                let mut d = Diagnostic::whole_file(
                    spec,
                    format!("unknown target `{spec}`: not a built-in target and no such file"),
                );
                let hint = suggest(spec, builtin_names());
                if let Some(h) = hint {
                    d = d.label(format!("did you mean `{h}`?"));
                }
                d.one_line = Some(format!(
                    "unknown target `{spec}`: not a built-in target and no such file{}; \
                     `onnx-safeify targets` lists the built-in targets",
                    hint.map(|h| format!(" (did you mean `{h}`?)"))
                        .unwrap_or_default()
                ));
                self.errs
                    .push(d.note(format!("built-in targets: {}", builtin_names().join(", "))));
                None
            } else {
                let display = normalize(&path).display().to_string();
                Some((Key::File(self.fs.canonical(&path)), display))
            }
        };
        let mut stack = Vec::new();
        let mut top = None;
        let mut acc = Acc::default();
        if let Some((key, display)) = key {
            if let Some((loaded, a)) = self.resolve(key, display, &mut stack, None) {
                top = Some(loaded);
                acc = a;
            }
        }
        for r in rules {
            let display = normalize(r).display().to_string();
            let key = Key::File(self.fs.canonical(r));
            if let Some(loaded) = self.read(key, &display, Mode::Overlay, None) {
                let ok = acc.ok;
                self.apply(&mut acc, &loaded.doc, ok);
                acc.chain.push(display);
            }
        }
        if acc.provider.is_none() {
            // `provider_kernel` asks the target's execution provider: a chain without one would
            // never fire the rule, silently.
            for rule in &acc.rules {
                let mut at = Vec::new();
                provider_kernel_preds(&rule.pattern, &mut at);
                for loc in at {
                    let msg = format!(
                        "rule `{}` matches on `provider_kernel`, but the target names no execution provider",
                        rule.id
                    );
                    let d = match self.sources.find(&loc.file) {
                        Some(file) => Diagnostic::at(
                            &self.sources,
                            Loc {
                                file,
                                line: loc.line,
                                col: loc.col,
                                len: "provider_kernel".len() as u32,
                                byte: None,
                            },
                            msg,
                        ),
                        None => Diagnostic::whole_file(loc.file.clone(), msg),
                    };
                    let names: Vec<&str> = crate::runtime::Profile::all()
                        .iter()
                        .map(|p| p.name)
                        .collect();
                    self.errs.push(d.note(format!(
                        "set `provider:` in the target or a base it extends ({})",
                        names.join(", ")
                    )));
                }
            }
        }
        if !self.errs.is_empty() {
            self.errs.sort();
            return Err(self.errs);
        }
        let top = top.ok_or_else(RuleErrors::default)?;
        let mut chain = Vec::new();
        for c in acc.chain {
            if !chain.contains(&c) {
                chain.push(c);
            }
        }
        Ok(Target {
            name: top
                .doc
                .target
                .as_ref()
                .map(|t| t.0.clone())
                .unwrap_or_default(),
            description: top.doc.description.clone().unwrap_or_default(),
            chain,
            rules: acc.rules,
            runtime: acc.runtime,
            fallback: acc.fallback,
            approximate: acc.approximate,
            provider: acc.provider,
            cpu_subgraphs: acc.cpu_subgraphs.unwrap_or_default(),
            device: acc.device,
        })
    }

    /// Read and check one file (once; later calls reuse the result).
    fn read(&mut self, key: Key, display: &str, mode: Mode, via: Option<Loc>) -> Option<Loaded> {
        if let Some(c) = self.cache.get(&key) {
            return c.clone();
        }
        let (text, path) = match &key {
            Key::Builtin(name) => (builtin(name).map(str::to_string), None),
            Key::File(_) => {
                let p = PathBuf::from(display);
                match self.fs.read(&p) {
                    Ok(t) => (Some(t), Some(p)),
                    Err(e) => {
                        let msg = format!("cannot read `{display}`: {e}");
                        let d = match via {
                            Some(loc) => Diagnostic::at(&self.sources, loc, msg)
                                .label("this base target is missing"),
                            None => Diagnostic::whole_file(display, msg),
                        };
                        self.errs.push(d);
                        (None, Some(p))
                    }
                }
            }
        };
        let loaded = text.map(|text| {
            let id = self.sources.add(display.to_string(), text);
            let doc = match yaml::parse(id, self.sources.text(id)) {
                Ok(root) => parse_file(&root, &self.sources, &mut self.errs, mode),
                Err(e) => {
                    let d = Diagnostic::at(
                        &self.sources,
                        e.loc,
                        format!("invalid YAML: {}", e.message),
                    );
                    self.errs.push(d);
                    FileDoc::default()
                }
            };
            Loaded {
                doc: Rc::new(doc),
                path,
            }
        });
        self.cache.insert(key, loaded.clone());
        loaded
    }

    /// Resolve a target file and its bases into one accumulated layer stack.
    fn resolve(
        &mut self,
        key: Key,
        display: String,
        stack: &mut Vec<(Key, String)>,
        via: Option<Loc>,
    ) -> Option<(Loaded, Acc)> {
        if let Some(pos) = stack.iter().position(|(k, _)| *k == key) {
            let mut names: Vec<&str> = stack[pos..].iter().map(|(_, d)| d.as_str()).collect();
            names.push(&display);
            let msg = format!("cyclic `extends`: {}", names.join(" -> "));
            let d = match via {
                Some(loc) => Diagnostic::at(&self.sources, loc, msg)
                    .label("extends a target that extends this one"),
                None => Diagnostic::whole_file(display.clone(), msg),
            };
            self.errs.push(d);
            return None;
        }
        if let Some((loaded, acc)) = self.resolved.get(&key) {
            return Some((loaded.clone(), acc.clone()));
        }
        let errors_before = self.errs.len();
        let loaded = self.read(key.clone(), &display, Mode::Target, via)?;
        let file_ok = self.errs.len() == errors_before;
        let mut acc = Acc {
            ok: true,
            ..Acc::default()
        };
        stack.push((key.clone(), display.clone()));
        let mut named: HashSet<Key> = HashSet::new();
        for (spec, loc) in loaded.doc.extends.clone() {
            if spec == "none" {
                continue;
            }
            let base = if looks_like_path(&spec) {
                match &loaded.path {
                    Some(p) => {
                        let joined = p.parent().unwrap_or(Path::new("")).join(&spec);
                        let shown = normalize(&joined).display().to_string();
                        Some((Key::File(self.fs.canonical(&joined)), shown))
                    }
                    None => {
                        let d = Diagnostic::at(
                            &self.sources,
                            loc,
                            format!("built-in targets extend built-in names only, not `{spec}`"),
                        );
                        self.errs.push(d);
                        None
                    }
                }
            } else if let Some(name) = builtin_names().into_iter().find(|n| *n == spec) {
                Some((Key::Builtin(name), builtin_display(name)))
            } else {
                let mut d =
                    Diagnostic::at(&self.sources, loc, format!("unknown base target `{spec}`"));
                if let Some(h) = suggest(&spec, builtin_names()) {
                    d = d.label(format!("did you mean `{h}`?"));
                }
                self.errs.push(d.note(format!(
                    "built-in targets: {}; a file must be named with its path (`./base.yaml`)",
                    builtin_names().join(", ")
                )));
                None
            };
            // The same base twice in one list: an error (the second would only re-apply it).
            let base = base.and_then(|(k, shown)| {
                if named.insert(k.clone()) {
                    return Some((k, shown));
                }
                let d = Diagnostic::at(
                    &self.sources,
                    loc,
                    format!("`extends` names `{shown}` twice"),
                );
                self.errs.push(d);
                None
            });
            match base.and_then(|(k, shown)| self.resolve(k, shown, stack, Some(loc))) {
                Some((_, sub)) => {
                    acc.ok &= sub.ok;
                    for r in sub.rules {
                        replace_or_push(&mut acc.rules, r, |a, b| a.id == b.id);
                    }
                    for s in sub.runtime {
                        replace_or_push(&mut acc.runtime, s, |a, b| a.key == b.key);
                    }
                    if sub.fallback.is_some() {
                        acc.fallback = sub.fallback;
                    }
                    if sub.approximate.is_some() {
                        acc.approximate = sub.approximate;
                    }
                    if sub.provider.is_some() {
                        acc.provider = sub.provider;
                    }
                    if sub.cpu_subgraphs.is_some() {
                        acc.cpu_subgraphs = sub.cpu_subgraphs;
                    }
                    acc.device.merge(&sub.device);
                    for c in sub.chain {
                        if !acc.chain.contains(&c) {
                            acc.chain.push(c);
                        }
                    }
                }
                None => acc.ok = false,
            }
        }
        stack.pop();
        // `disable` is checked against the bases only when they all loaded cleanly.
        let bases_ok = acc.ok;
        self.apply(&mut acc, &loaded.doc, bases_ok);
        acc.ok = bases_ok && file_ok;
        if !acc.chain.contains(&display) {
            acc.chain.push(display);
        }
        self.resolved.insert(key, (loaded.clone(), acc.clone()));
        Some((loaded, acc))
    }

    /// Apply a file's own layer (disable, rules, runtime) on top of what its bases gave.
    fn apply(&mut self, acc: &mut Acc, doc: &FileDoc, bases_ok: bool) {
        for (id, loc) in &doc.disable {
            match acc.rules.iter().position(|r| r.id == *id) {
                Some(p) => {
                    acc.rules.remove(p);
                }
                None if bases_ok => {
                    let mut d = Diagnostic::at(
                        &self.sources,
                        *loc,
                        format!("`disable` names `{id}`, which no base target has"),
                    );
                    if let Some(h) = suggest(id, acc.rules.iter().map(|r| r.id.as_str())) {
                        d = d.label(format!("did you mean `{h}`?"));
                    }
                    self.errs.push(d);
                }
                None => {}
            }
        }
        for r in &doc.rules {
            replace_or_push(&mut acc.rules, r.clone(), |a, b| a.id == b.id);
        }
        for s in &doc.runtime {
            replace_or_push(&mut acc.runtime, s.clone(), |a, b| a.key == b.key);
        }
        if doc.fallback.is_some() {
            acc.fallback = doc.fallback;
        }
        if doc.approximate.is_some() {
            acc.approximate = doc.approximate;
        }
        if doc.provider.is_some() {
            acc.provider = doc.provider.clone();
        }
        if doc.cpu_subgraphs.is_some() {
            acc.cpu_subgraphs = doc.cpu_subgraphs;
        }
        acc.device.merge(&doc.device);
    }
}

fn replace_or_push<T>(list: &mut Vec<T>, item: T, same: impl Fn(&T, &T) -> bool) {
    match list.iter().position(|x| same(x, &item)) {
        Some(p) => list[p] = item,
        None => list.push(item),
    }
}

/// The places of every `provider_kernel` predicate in `p`, nested patterns included.
fn provider_kernel_preds(p: &crate::rules::pattern::Pattern, out: &mut Vec<SourceLoc>) {
    use crate::rules::pattern::PredKind;
    for pred in &p.preds {
        match &pred.kind {
            PredKind::ProviderKernel(_) => out.push(pred.at.clone()),
            PredKind::Not(inner) => provider_kernel_preds(inner, out),
            PredKind::Any(ps) | PredKind::All(ps) => {
                for q in ps {
                    provider_kernel_preds(q, out);
                }
            }
            PredKind::FollowedBy(l) | PredKind::PrecededBy(l) => {
                provider_kernel_preds(&l.pattern, out)
            }
            _ => {}
        }
    }
}
