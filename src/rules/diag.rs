//! Diagnostics for rule files, rendered like a compiler's:
//!
//! ```text
//! error: unknown operator `Cnv`
//!   --> my.yaml:5:17
//!    |
//!  5 |     match: {op: Cnv}
//!    |                 ^^^ did you mean `Conv`?
//! ```
//!
//! Every error of every file of a target is collected and reported together.

use std::fmt;

use super::yaml::Loc;

/// A source text and the name it is shown under.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
}

/// The files read while loading a target, indexed by [`Loc::file`].
#[derive(Debug, Clone, Default)]
pub struct Sources {
    files: Vec<SourceFile>,
}

impl Sources {
    pub fn add(&mut self, name: String, text: String) -> u32 {
        self.files.push(SourceFile { name, text });
        (self.files.len() - 1) as u32
    }
    /// The index of the file named `name` (as [`Sources::name`] gives it).
    pub fn find(&self, name: &str) -> Option<u32> {
        self.files
            .iter()
            .position(|f| f.name == name)
            .map(|i| i as u32)
    }
    pub fn name(&self, file: u32) -> &str {
        self.files
            .get(file as usize)
            .map(|f| f.name.as_str())
            .unwrap_or("<unknown>")
    }
    pub fn text(&self, file: u32) -> &str {
        self.files
            .get(file as usize)
            .map(|f| f.text.as_str())
            .unwrap_or("")
    }
    /// Line `line` (1-based) of a file, without its line break.
    pub fn line(&self, file: u32, line: u32) -> Option<&str> {
        let idx = usize::try_from(line).ok()?.checked_sub(1)?;
        self.text(file)
            .split('\n')
            .nth(idx)
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
    }
    /// The source text a location covers, when its byte range is known.
    pub fn snippet(&self, loc: &Loc) -> Option<&str> {
        let (o, n) = loc.byte?;
        self.text(loc.file).get(o..o.checked_add(n)?)
    }
    /// `file:line:col` for a location.
    pub fn place(&self, loc: &Loc) -> String {
        format!("{}:{}:{}", self.name(loc.file), loc.line, loc.col)
    }
}

/// One error in a rule file, with everything needed to render it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// What is wrong, one line.
    pub message: String,
    /// The file as it is named to the user (a path, or `builtin:NAME.yaml`).
    pub file: String,
    pub line: u32,
    pub col: u32,
    /// Characters to underline (at least one is shown).
    pub len: u32,
    /// A short text printed after the carets (a hint), possibly empty.
    pub label: String,
    /// The source line, for the snippet.
    pub source_line: Option<String>,
    /// Extra lines printed as `= note: ...`.
    pub notes: Vec<String>,
    /// The whole error as one line, for an error that is about no file's contents (an unknown
    /// target name): alone, it is reported as that line instead of as a rule-file error.
    pub one_line: Option<String>,
    /// Position of the file in load order, for sorting.
    file_index: u32,
}

impl Diagnostic {
    /// A diagnostic at a place of a loaded file.
    pub fn at(sources: &Sources, loc: Loc, message: impl Into<String>) -> Self {
        Diagnostic {
            message: message.into(),
            file: sources.name(loc.file).to_string(),
            line: loc.line,
            col: loc.col,
            len: loc.len.max(1),
            label: String::new(),
            source_line: sources.line(loc.file, loc.line).map(str::to_string),
            notes: Vec::new(),
            one_line: None,
            file_index: loc.file,
        }
    }
    /// A diagnostic about a file as a whole (it could not be read, for instance).
    pub fn whole_file(file: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic {
            message: message.into(),
            file: file.into(),
            line: 0,
            col: 0,
            len: 0,
            label: String::new(),
            source_line: None,
            notes: Vec::new(),
            one_line: None,
            file_index: u32::MAX,
        }
    }
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "error: {}", self.message)?;
        if self.line == 0 {
            write!(f, "  --> {}", self.file)?;
        } else {
            let num = self.line.to_string();
            let pad = " ".repeat(num.len());
            write!(f, "{pad}--> {}:{}:{}", self.file, self.line, self.col)?;
            if let Some(src) = &self.source_line {
                let src_shown: String = src
                    .chars()
                    .map(|c| if c.is_control() && c != '\t' { ' ' } else { c })
                    .collect();
                write!(f, "\n{pad} |\n{num} | {}", src_shown.trim_end())?;
                // Indent the carets like the text before them (tabs stay tabs).
                let before: String = src
                    .chars()
                    .take(self.col.saturating_sub(1) as usize)
                    .map(|c| if c == '\t' { '\t' } else { ' ' })
                    .collect();
                let rest = src
                    .chars()
                    .count()
                    .saturating_sub(self.col.saturating_sub(1) as usize);
                let width = (self.len as usize).min(rest).max(1);
                write!(f, "\n{pad} | {before}{}", "^".repeat(width))?;
                if !self.label.is_empty() {
                    write!(f, " {}", self.label)?;
                }
            } else if !self.label.is_empty() {
                write!(f, "\n{pad} = {}", self.label)?;
            }
            for n in &self.notes {
                write!(f, "\n{pad} = note: {n}")?;
            }
            return Ok(());
        }
        if !self.label.is_empty() {
            write!(f, "\n   = {}", self.label)?;
        }
        for n in &self.notes {
            write!(f, "\n   = note: {n}")?;
        }
        Ok(())
    }
}

/// Every error found while loading a target; loading fails if there is at least one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleErrors {
    pub diagnostics: Vec<Diagnostic>,
}

impl RuleErrors {
    pub fn is_empty(&self) -> bool {
        self.diagnostics.is_empty()
    }
    pub fn len(&self) -> usize {
        self.diagnostics.len()
    }
    pub(crate) fn push(&mut self, d: Diagnostic) {
        if !self.diagnostics.contains(&d) {
            self.diagnostics.push(d);
        }
    }
    /// Order by file (load order), then place in the file.
    pub(crate) fn sort(&mut self) {
        self.diagnostics
            .sort_by_key(|d| (d.file_index, d.line, d.col));
    }
    /// The one-line summary: `3 errors in rule files`.
    pub fn summary(&self) -> String {
        match self.diagnostics.len() {
            1 => "1 error in rule files".to_string(),
            n => format!("{n} errors in rule files"),
        }
    }
}

impl fmt::Display for RuleErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                f.write_str("\n\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for RuleErrors {}

impl From<RuleErrors> for crate::Error {
    fn from(e: RuleErrors) -> Self {
        if let [Diagnostic {
            one_line: Some(line),
            ..
        }] = e.diagnostics.as_slice()
        {
            return crate::Error::new(crate::ErrorKind::Usage, line.clone());
        }
        crate::Error::new(crate::ErrorKind::Rules, format!("{}\n\n{e}", e.summary()))
    }
}
