//! onnxruntime-genai model folders: `onnx-safeify DIR --target T` on a folder that holds a
//! `genai_config.json` writes a new folder with every model the config names compiled for the
//! target, the config with the target's runtime settings merged into each model's
//! `session_options.config_entries`, and every other file copied unchanged.
//!
//! The new folder is built under a temporary name beside its final place and renamed into
//! place only when every model compiled: an error leaves nothing behind, and the input folder
//! is never written.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::rules::schema::RuntimeSetting;

/// The config file that marks a genai folder.
pub const CONFIG: &str = "genai_config.json";

/// Is `path` a genai model folder?
pub fn is_genai_folder(path: &Path) -> bool {
    path.is_dir() && path.join(CONFIG).is_file()
}

/// A folder to compile: its models (paths relative to it, as the config names them) and the
/// config, parsed.
#[derive(Debug, Clone)]
pub struct Folder {
    pub dir: PathBuf,
    pub config: Value,
    /// The config's text as read (the output keeps it where nothing changes).
    pub text: String,
    /// The `filename`s of `model.*` sections (decoder, encoder, vision, embedding...), in the
    /// config's order, each once.
    pub models: Vec<String>,
}

fn err(dir: &Path, msg: String) -> Error {
    Error::new(ErrorKind::Usage, msg).in_file(&dir.join(CONFIG))
}

/// Read and check `dir`'s config (untrusted: every model file must be a plain name inside the
/// folder that exists).
pub fn read(dir: &Path) -> Result<Folder> {
    let path = dir.join(CONFIG);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::io(&path, "cannot read the config", e))?;
    let config: Value =
        serde_json::from_str(&text).map_err(|e| err(dir, format!("not valid JSON: {e}")))?;
    let model = config
        .get("model")
        .and_then(Value::as_object)
        .ok_or_else(|| err(dir, "no `model` object".into()))?;
    let mut models: Vec<String> = Vec::new();
    for (section, v) in model {
        let Some(file) = v.get("filename") else {
            continue;
        };
        let file = file
            .as_str()
            .ok_or_else(|| err(dir, format!("`model.{section}.filename` is not a string")))?;
        let plain = !file.is_empty()
            && Path::new(file)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain {
            return Err(err(
                dir,
                format!("`model.{section}.filename` {file:?} is not a file name inside the folder"),
            ));
        }
        if !dir.join(file).is_file() {
            return Err(err(
                dir,
                format!("`model.{section}.filename` names {file}, which is not in the folder"),
            ));
        }
        if !models.iter().any(|m| m == file) {
            models.push(file.to_string());
        }
    }
    if models.is_empty() {
        return Err(err(dir, "no model section names a `filename`".into()));
    }
    Ok(Folder {
        dir: dir.to_path_buf(),
        text,
        config,
        models,
    })
}

/// The config with `settings` merged into every model section's
/// `session_options.config_entries` (a setting already there is replaced: the target's value
/// is the one the compiled model needs).
pub fn merged_config(config: &Value, settings: &[RuntimeSetting]) -> Value {
    let mut out = config.clone();
    if settings.is_empty() {
        // Nothing to merge: no empty `session_options` or `config_entries` either.
        return out;
    }
    if let Some(model) = out.get_mut("model").and_then(Value::as_object_mut) {
        for (_, section) in model.iter_mut() {
            let Some(section) = section.as_object_mut() else {
                continue;
            };
            if !section.contains_key("filename") {
                continue;
            }
            let so = section
                .entry("session_options")
                .or_insert_with(|| Value::Object(Map::new()));
            if !so.is_object() {
                *so = Value::Object(Map::new());
            }
            let so = so.as_object_mut().expect("an object");
            let entries = so
                .entry("config_entries")
                .or_insert_with(|| Value::Object(Map::new()));
            if !entries.is_object() {
                *entries = Value::Object(Map::new());
            }
            let entries = entries.as_object_mut().expect("an object");
            for s in settings {
                entries.insert(s.key.clone(), Value::String(s.value.clone()));
            }
        }
    }
    out
}

/// [`merged_config`] as an edit of the config's text: the user's key order, indentation and
/// spacing are kept, and only what the settings change is written (a setting's value replaced
/// in place, a new entry or object added after the last member, indented as its neighbours).
/// `None` when the text is laid out in a way the edit does not handle; the caller then writes
/// [`merged_config`] whole. The result is checked to parse to [`merged_config`]'s value.
pub fn merged_config_text(text: &str, settings: &[RuntimeSetting]) -> Option<String> {
    let config: Value = serde_json::from_str(text).ok()?;
    let want = merged_config(&config, settings);
    if want == config {
        return Some(text.to_string());
    }
    let b = text.as_bytes();
    let root = json::object(b, json::ws(b, 0)?)?;
    let unit = json::indent_unit(text, &root);
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    let model = root.member(b, "model")?;
    let model = json::object(b, model.value.0)?;
    for section in &model.members {
        if b[section.value.0] != b'{' {
            continue;
        }
        let sec = json::object(b, section.value.0)?;
        if sec.member(b, "filename").is_none() {
            continue;
        }
        let entries = |existing: &[(String, Value)]| -> Value {
            let mut m = Map::new();
            for s in settings {
                if !existing.iter().any(|(k, _)| *k == s.key) {
                    m.insert(s.key.clone(), Value::String(s.value.clone()));
                }
            }
            Value::Object(m)
        };
        let Some(so) = sec.member(b, "session_options") else {
            let mut v = Map::new();
            v.insert("config_entries".into(), entries(&[]));
            edits.push(json::add_members(
                text,
                &sec,
                &unit,
                &[("session_options", Value::Object(v))],
            )?);
            continue;
        };
        let so = json::object(b, so.value.0)?;
        let Some(ce) = so.member(b, "config_entries") else {
            edits.push(json::add_members(
                text,
                &so,
                &unit,
                &[("config_entries", entries(&[]))],
            )?);
            continue;
        };
        let ce = json::object(b, ce.value.0)?;
        let mut existing = Vec::new();
        for m in &ce.members {
            let key = m.key(b)?;
            if let Some(s) = settings.iter().find(|s| s.key == key) {
                let v = Value::String(s.value.clone());
                let now: Value = serde_json::from_slice(&b[m.value.0..m.value.1]).ok()?;
                if now != v {
                    edits.push((m.value.0, m.value.1, serde_json::to_string(&v).ok()?));
                }
            }
            existing.push((key, Value::Null));
        }
        if let Value::Object(new) = entries(&existing) {
            if !new.is_empty() {
                let new: Vec<(&str, Value)> = settings
                    .iter()
                    .filter_map(|s| new.get(&s.key).map(|v| (s.key.as_str(), v.clone())))
                    .collect();
                edits.push(json::add_members(text, &ce, &unit, &new)?);
            }
        }
    }
    edits.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut out = text.to_string();
    for (start, end, with) in edits {
        out.replace_range(start..end, &with);
    }
    let got: Value = serde_json::from_str(&out).ok()?;
    (got == want).then_some(out)
}

/// Just enough of a JSON reader to find where an object's members are in the text.
mod json {
    use serde_json::Value;

    /// An object: where its braces are, and its members.
    pub struct Obj {
        pub open: usize,
        pub close: usize,
        pub members: Vec<Member>,
    }

    /// One `"key": value` of an object: the key's quoted text and the value's byte range.
    pub struct Member {
        pub key: (usize, usize),
        pub value: (usize, usize),
    }

    impl Member {
        pub fn key(&self, b: &[u8]) -> Option<String> {
            serde_json::from_slice(&b[self.key.0..self.key.1]).ok()
        }
    }

    impl Obj {
        pub fn member(&self, b: &[u8], key: &str) -> Option<&Member> {
            self.members
                .iter()
                .rev()
                .find(|m| m.key(b).as_deref() == Some(key))
        }
    }

    pub fn ws(b: &[u8], mut i: usize) -> Option<usize> {
        while matches!(b.get(i)?, b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        Some(i)
    }

    /// The index after the string starting at `i` (a quote).
    fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
        i += 1;
        loop {
            match *b.get(i)? {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
    }

    /// The index after the value starting at `i`.
    fn value_end(b: &[u8], i: usize) -> Option<usize> {
        match *b.get(i)? {
            b'"' => string_end(b, i),
            b'{' | b'[' => {
                let mut depth = 0usize;
                let mut j = i;
                loop {
                    match *b.get(j)? {
                        b'"' => {
                            j = string_end(b, j)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return Some(j + 1);
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
            }
            _ => {
                let mut j = i;
                while j < b.len() && !b",}] \t\r\n".contains(&b[j]) {
                    j += 1;
                }
                (j > i).then_some(j)
            }
        }
    }

    /// The object starting at `i` (a brace).
    pub fn object(b: &[u8], i: usize) -> Option<Obj> {
        if *b.get(i)? != b'{' {
            return None;
        }
        let mut members = Vec::new();
        let mut j = ws(b, i + 1)?;
        if b[j] == b'}' {
            return Some(Obj {
                open: i,
                close: j,
                members,
            });
        }
        loop {
            if b[j] != b'"' {
                return None;
            }
            let key_end = string_end(b, j)?;
            let colon = ws(b, key_end)?;
            if b[colon] != b':' {
                return None;
            }
            let v = ws(b, colon + 1)?;
            let v_end = value_end(b, v)?;
            members.push(Member {
                key: (j, key_end),
                value: (v, v_end),
            });
            let n = ws(b, v_end)?;
            match b[n] {
                b',' => j = ws(b, n + 1)?,
                b'}' => {
                    return Some(Obj {
                        open: i,
                        close: n,
                        members,
                    })
                }
                _ => return None,
            }
        }
    }

    /// The whitespace that starts the line holding byte `i`, if only whitespace precedes `i`
    /// on it.
    fn line_indent(text: &str, i: usize) -> Option<&str> {
        let start = text[..i].rfind('\n').map_or(0, |n| n + 1);
        let lead = &text[start..i];
        lead.chars().all(|c| c == ' ' || c == '\t').then_some(lead)
    }

    /// The indentation step of the document: the root's first member's indent, else two spaces.
    pub fn indent_unit(text: &str, root: &Obj) -> String {
        root.members
            .first()
            .and_then(|m| line_indent(text, m.key.0))
            .filter(|s| !s.is_empty())
            .unwrap_or("  ")
            .to_string()
    }

    /// `value` as pretty JSON indented by `unit`, its lines after the first starting at `at`.
    fn render(value: &Value, unit: &str, at: &str) -> Option<String> {
        use serde::Serialize;
        let mut buf = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        value.serialize(&mut ser).ok()?;
        Some(
            String::from_utf8(buf)
                .ok()?
                .replace('\n', &format!("\n{at}")),
        )
    }

    /// The edit that adds `members` at the end of `obj`, laid out as its members are (one per
    /// line at their indent, or on one line).
    pub fn add_members(
        text: &str,
        obj: &Obj,
        unit: &str,
        members: &[(&str, Value)],
    ) -> Option<(usize, usize, String)> {
        let pair = |k: &str, v: &Value, at: &str| -> Option<String> {
            Some(format!(
                "{}: {}",
                serde_json::to_string(k).ok()?,
                render(v, unit, at)?
            ))
        };
        match obj.members.last() {
            Some(last) => {
                let mut add = String::new();
                match line_indent(text, last.key.0) {
                    Some(indent) => {
                        for (k, v) in members {
                            add.push_str(&format!(",\n{indent}{}", pair(k, v, indent)?));
                        }
                    }
                    None => {
                        for (k, v) in members {
                            add.push_str(&format!(", {}", serde_json::to_string(k).ok()?));
                            add.push_str(&format!(": {}", serde_json::to_string(v).ok()?));
                        }
                    }
                }
                Some((last.value.1, last.value.1, add))
            }
            None => {
                let own = {
                    let start = text[..obj.open].rfind('\n').map_or(0, |n| n + 1);
                    let lead = &text[start..obj.open];
                    let n = lead.len() - lead.trim_start().len();
                    &lead[..n]
                };
                let inner = format!("{own}{unit}");
                let body: Vec<String> = members
                    .iter()
                    .map(|(k, v)| Some(format!("{inner}{}", pair(k, v, &inner)?)))
                    .collect::<Option<_>>()?;
                Some((
                    obj.open,
                    obj.close + 1,
                    format!("{{\n{}\n{own}}}", body.join(",\n")),
                ))
            }
        }
    }
}

/// The files of the folder to copy as they are: everything but the models the config names,
/// the data files those models refer to (`data`), and the config itself. Folders are copied
/// whole; symlinks are refused (a link could lead out of the folder).
pub fn other_files(folder: &Folder, data: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&folder.dir)
        .map_err(|e| Error::io(&folder.dir, "cannot list the folder", e))?
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| Error::io(&folder.dir, "cannot list the folder", e))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if name == CONFIG || folder.models.contains(&name) {
            continue;
        }
        if data.iter().any(|d| same(d, &path)) {
            continue;
        }
        let ft = e
            .file_type()
            .map_err(|er| Error::io(&path, "cannot read", er))?;
        if ft.is_symlink() {
            return Err(Error::new(
                ErrorKind::Usage,
                "a symbolic link in a genai folder is not copied (it could lead out of the folder)",
            )
            .in_file(&path));
        }
        out.push(path);
    }
    Ok(out)
}

fn same(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// Copy a file or a folder (recursively) to `to`.
pub fn copy_entry(from: &Path, to: &Path) -> Result<()> {
    let meta = std::fs::symlink_metadata(from).map_err(|e| Error::io(from, "cannot read", e))?;
    if meta.is_dir() {
        std::fs::create_dir_all(to).map_err(|e| Error::io(to, "cannot create", e))?;
        let mut entries: Vec<_> = std::fs::read_dir(from)
            .map_err(|e| Error::io(from, "cannot list", e))?
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| Error::io(from, "cannot list", e))?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            copy_entry(&e.path(), &to.join(e.file_name()))?;
        }
        Ok(())
    } else if meta.is_file() {
        std::fs::copy(from, to).map_err(|e| Error::io(to, "cannot copy", e))?;
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Usage,
            "neither a file nor a folder (a link?): not copied",
        )
        .in_file(from))
    }
}

/// A folder being built: removed on drop unless [`Staging::persist`] moved it into place.
pub struct Staging {
    pub path: PathBuf,
    done: bool,
}

impl Staging {
    /// A new empty folder beside `final_dir`.
    pub fn create(final_dir: &Path) -> Result<Self> {
        let parent = final_dir
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = final_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into());
        for attempt in 0..1000u32 {
            let p = parent.join(format!(".{name}.tmp-{}-{attempt}", std::process::id()));
            match std::fs::create_dir(&p) {
                Ok(()) => {
                    return Ok(Staging {
                        path: p,
                        done: false,
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io(final_dir, "cannot create the output folder", e)),
            }
        }
        Err(
            Error::new(ErrorKind::Io, "cannot find a free temporary folder name")
                .in_file(final_dir),
        )
    }
    /// Move the folder into place. An existing output folder is replaced only when it was
    /// written by a compile before (it holds a `genai_config.json`); anything else is refused.
    pub fn persist(mut self, to: &Path) -> Result<()> {
        if to.exists() {
            if !is_genai_folder(to) {
                return Err(Error::new(
                    ErrorKind::Usage,
                    "refusing to replace it: it exists and is not a genai model folder",
                )
                .in_file(to));
            }
            let old = self.path.with_extension("old");
            std::fs::rename(to, &old).map_err(|e| Error::io(to, "cannot replace", e))?;
            if let Err(e) = std::fs::rename(&self.path, to) {
                let _ = std::fs::rename(&old, to);
                return Err(Error::io(to, "cannot move the output folder into place", e));
            }
            let _ = std::fs::remove_dir_all(&old);
        } else {
            std::fs::rename(&self.path, to)
                .map_err(|e| Error::io(to, "cannot move the output folder into place", e))?;
        }
        self.done = true;
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(k: &str, v: &str) -> RuntimeSetting {
        RuntimeSetting {
            key: k.into(),
            value: v.into(),
            why: String::new(),
            evidence: Vec::new(),
            source: Default::default(),
        }
    }

    #[test]
    fn settings_merge_into_every_model_section() {
        let c: Value = serde_json::from_str(
            r#"{"model": {"type": "llama", "decoder": {"filename": "m.onnx",
                "session_options": {"log_id": "x", "config_entries": {"a": "1", "k": "old"}}},
                "embedding": {"filename": "e.onnx"}}, "search": {}}"#,
        )
        .unwrap();
        let m = merged_config(&c, &[setting("k", "new"), setting("b", "2")]);
        let d = &m["model"]["decoder"]["session_options"];
        assert_eq!(d["log_id"], "x");
        assert_eq!(d["config_entries"]["a"], "1");
        assert_eq!(d["config_entries"]["k"], "new");
        assert_eq!(d["config_entries"]["b"], "2");
        assert_eq!(
            m["model"]["embedding"]["session_options"]["config_entries"]["b"],
            "2"
        );
        assert_eq!(m["model"]["type"], "llama");
    }

    #[test]
    fn the_config_keeps_its_order_and_layout_where_nothing_changes() {
        let text = "{\n    \"search\": {\"max_length\": 64},\n    \"model\": {\n        \"type\": \"llama\",\n        \"decoder\": {\n            \"session_options\": {\n                \"log_id\": \"x\",\n                \"config_entries\": {\"a\": \"1\", \"k\": \"old\"}\n            },\n            \"filename\": \"m.onnx\"\n        },\n        \"embedding\": {\n            \"filename\": \"e.onnx\"\n        },\n        \"vision\": {\"filename\": \"v.onnx\", \"session_options\": {}}\n    }\n}\n";
        let out = merged_config_text(text, &[setting("k", "new"), setting("b", "2")]).unwrap();
        assert_eq!(
            out,
            "{\n    \"search\": {\"max_length\": 64},\n    \"model\": {\n        \"type\": \"llama\",\n        \"decoder\": {\n            \"session_options\": {\n                \"log_id\": \"x\",\n                \"config_entries\": {\"a\": \"1\", \"k\": \"new\", \"b\": \"2\"}\n            },\n            \"filename\": \"m.onnx\"\n        },\n        \"embedding\": {\n            \"filename\": \"e.onnx\",\n            \"session_options\": {\n                \"config_entries\": {\n                    \"b\": \"2\",\n                    \"k\": \"new\"\n                }\n            }\n        },\n        \"vision\": {\"filename\": \"v.onnx\", \"session_options\": {\n            \"config_entries\": {\n                \"b\": \"2\",\n                \"k\": \"new\"\n            }\n        }}\n    }\n}\n"
        );
        // Nothing to merge: the bytes as they were.
        assert_eq!(merged_config_text(text, &[]).unwrap(), text);
    }

    #[test]
    fn model_names_must_stay_in_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.onnx"), b"").unwrap();
        for (cfg, ok) in [
            (r#"{"model": {"decoder": {"filename": "m.onnx"}}}"#, true),
            (
                r#"{"model": {"decoder": {"filename": "../m.onnx"}}}"#,
                false,
            ),
            (
                r#"{"model": {"decoder": {"filename": "/etc/passwd"}}}"#,
                false,
            ),
            (
                r#"{"model": {"decoder": {"filename": "missing.onnx"}}}"#,
                false,
            ),
            (r#"{"model": {"decoder": {"filename": 3}}}"#, false),
            (r#"{"model": {}}"#, false),
            ("not json", false),
        ] {
            std::fs::write(dir.path().join(CONFIG), cfg).unwrap();
            assert_eq!(read(dir.path()).is_ok(), ok, "{cfg}");
        }
    }
}
