//! Errors of running a model (reported by `verify`, `probe` and `bisect`): each renders as one
//! line that names the file and, where there is one, the input or output concerned. All of
//! them mean exit code 2.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// No ONNX Runtime library could be found; the message says how to get one.
    #[error("{0}")]
    RuntimeNotFound(String),
    /// A library was found but could not be loaded or initialised.
    #[error("cannot load ONNX Runtime from {}: {message}", path.display())]
    RuntimeLoad { path: PathBuf, message: String },
    /// A model file could not be read or decoded, or is not something we can run.
    #[error("{}: {message}", path.display())]
    Model { path: PathBuf, message: String },
    /// ONNX Runtime refused to load a model.
    #[error("{}: ONNX Runtime cannot load the model: {message}", path.display())]
    Session { path: PathBuf, message: String },
    /// ONNX Runtime failed while running a model.
    #[error("{}: ONNX Runtime failed to run the model: {message}", path.display())]
    Run { path: PathBuf, message: String },
    /// A graph input or output has a type the verifier cannot handle.
    #[error("{}: {what} '{name}': {message}", path.display())]
    Value {
        path: PathBuf,
        what: &'static str,
        name: String,
        message: String,
    },
    /// A file of inputs or expected outputs is unreadable or does not fit the model.
    #[error("{}: {message}", path.display())]
    Data { path: PathBuf, message: String },
    /// A partition manifest is malformed or inconsistent.
    #[error("{}: {message}", path.display())]
    Manifest { path: PathBuf, message: String },
    /// The two models cannot be compared (different inputs) or an option is unusable.
    #[error("{0}")]
    Usage(String),
}

impl VerifyError {
    pub(crate) fn model(path: &Path, message: impl Into<String>) -> VerifyError {
        VerifyError::Model {
            path: path.to_path_buf(),
            message: one_line(&message.into()),
        }
    }

    pub(crate) fn data(path: &Path, message: impl Into<String>) -> VerifyError {
        VerifyError::Data {
            path: path.to_path_buf(),
            message: one_line(&message.into()),
        }
    }

    pub(crate) fn manifest(path: &Path, message: impl Into<String>) -> VerifyError {
        VerifyError::Manifest {
            path: path.to_path_buf(),
            message: one_line(&message.into()),
        }
    }

    pub(crate) fn input(path: &Path, name: &str, message: impl Into<String>) -> VerifyError {
        VerifyError::Value {
            path: path.to_path_buf(),
            what: "input",
            name: name.to_string(),
            message: one_line(&message.into()),
        }
    }

    pub(crate) fn output(path: &Path, name: &str, message: impl Into<String>) -> VerifyError {
        VerifyError::Value {
            path: path.to_path_buf(),
            what: "output",
            name: name.to_string(),
            message: one_line(&message.into()),
        }
    }
}

/// Collapses a possibly multi-line message (ONNX Runtime's often are) into one line.
pub(crate) fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for part in s
        .split(['\n', '\r'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        if !out.is_empty() {
            out.push_str(" | ");
        }
        out.push_str(part);
    }
    out
}
