//! One error type for the whole pipeline: a message that names the file and, where known,
//! the place inside it (graph, node, attribute, rule line). Rendered as one line.

use std::fmt;
use std::path::{Path, PathBuf};

/// What went wrong, broadly; the CLI maps every kind to exit code 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Reading or writing a file failed.
    Io,
    /// The bytes are not a valid ONNX protobuf.
    Decode,
    /// The model decodes but breaks a rule of the format (undefined input, cycle, bad tensor...).
    Invalid,
    /// External data that is missing or points outside the model's folder.
    ExternalData,
    /// A rule or target file is wrong.
    Rules,
    /// The user asked for something that cannot be done (bad option, output equals input...).
    Usage,
}

/// An error with the file it concerns and a precise, human-readable message.
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub file: Option<PathBuf>,
    pub message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            file: None,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }
    pub fn io(path: &Path, what: &str, e: std::io::Error) -> Self {
        Error {
            kind: ErrorKind::Io,
            file: Some(path.to_path_buf()),
            message: format!("{what}: {e}"),
        }
    }
    /// Attach the file this error concerns, unless one is already named.
    pub fn in_file(mut self, path: &Path) -> Self {
        if self.file.is_none() {
            self.file = Some(path.to_path_buf());
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(p) => write!(f, "{}: {}", p.display(), self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}
