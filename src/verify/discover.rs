//! Finding the ONNX Runtime shared library: `ORT_DYLIB_PATH`, else the `onnxruntime`
//! Python package (an active virtualenv, the project's venv, or python3 on PATH).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::error::VerifyError;

/// Environment variable naming the ONNX Runtime library (the one `ort` itself uses).
pub const ORT_DYLIB_ENV: &str = "ORT_DYLIB_PATH";
/// Set to `1` to skip looking for a Python `onnxruntime` package.
pub const NO_PYTHON_DISCOVERY_ENV: &str = "ONNX_SAFEIFY_NO_PYTHON_DISCOVERY";
/// The project's Python venv (default `$HOME/.cache/onnx-safeify/venv`).
pub const VENV_ENV: &str = "ONNX_SAFEIFY_VENV";

/// The inputs of library discovery, separated from the process environment so that it
/// can be tested without touching global state.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// An explicit library path (`--ort-library` or `ORT_DYLIB_PATH`); it must exist.
    pub explicit: Option<PathBuf>,
    /// Whether to look for a Python `onnxruntime` package at all.
    pub python: bool,
    /// Virtual environments to search, in order.
    pub venvs: Vec<PathBuf>,
    /// Python interpreters to ask, in order (names on PATH or paths).
    pub interpreters: Vec<PathBuf>,
}

impl Discovery {
    /// Discovery as configured by the process environment.
    pub fn from_env() -> Discovery {
        let explicit = std::env::var_os(ORT_DYLIB_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let python = !matches!(
            std::env::var(NO_PYTHON_DISCOVERY_ENV).as_deref(),
            Ok("1") | Ok("true") | Ok("yes")
        );
        let mut venvs = Vec::new();
        if let Some(v) = std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
            venvs.push(PathBuf::from(v));
        }
        venvs.push(default_venv());
        let mut interpreters = Vec::new();
        for v in &venvs {
            interpreters.push(v.join("bin").join("python3"));
            interpreters.push(v.join("Scripts").join("python.exe"));
        }
        interpreters.push(PathBuf::from("python3"));
        interpreters.push(PathBuf::from("python"));
        Discovery {
            explicit,
            python,
            venvs,
            interpreters,
        }
    }
}

/// `$ONNX_SAFEIFY_VENV`, else `$HOME/.cache/onnx-safeify/venv`.
pub fn default_venv() -> PathBuf {
    if let Some(v) = std::env::var_os(VENV_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(v);
    }
    let home = std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("onnx-safeify").join("venv")
}

/// Returns the ONNX Runtime library to load, or an error that says how to get one.
pub fn find_onnxruntime(d: &Discovery) -> Result<PathBuf, VerifyError> {
    if let Some(p) = &d.explicit {
        if p.is_file() {
            return Ok(p.clone());
        }
        return Err(VerifyError::RuntimeNotFound(format!(
            "ONNX Runtime library {} (from --ort-library or {ORT_DYLIB_ENV}) does not exist; \
             point {ORT_DYLIB_ENV} at libonnxruntime.so from an onnxruntime >= 1.24 release \
             or from the Python package (pip install onnxruntime; the library is in \
             site-packages/onnxruntime/capi/)",
            p.display()
        )));
    }
    let mut looked = Vec::new();
    if d.python {
        for venv in &d.venvs {
            looked.push(venv.display().to_string());
            for sp in site_packages(venv) {
                if let Some(lib) = lib_in_package(&sp.join("onnxruntime")) {
                    return Ok(lib);
                }
            }
        }
        for py in &d.interpreters {
            looked.push(py.display().to_string());
            if let Some(pkg) = ask_python(py) {
                if let Some(lib) = lib_in_package(&pkg) {
                    return Ok(lib);
                }
            }
        }
    }
    let searched = if d.python {
        format!(
            "no onnxruntime Python package found (looked in {})",
            looked.join(", ")
        )
    } else {
        format!("Python discovery is disabled ({NO_PYTHON_DISCOVERY_ENV}=1)")
    };
    Err(VerifyError::RuntimeNotFound(format!(
        "ONNX Runtime was not found: {ORT_DYLIB_ENV} is not set and {searched}. To get it: \
         `python3 -m venv {venv} && {venv}/bin/pip install onnxruntime` (found automatically), \
         or set {ORT_DYLIB_ENV} to the libonnxruntime.so of an onnxruntime >= 1.24 release",
        venv = default_venv().display()
    )))
}

/// `lib/python3.*/site-packages` (POSIX) and `Lib/site-packages` (Windows) of a venv.
fn site_packages(venv: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(venv.join("lib")) {
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("python"))
            })
            .collect();
        dirs.sort();
        dirs.reverse();
        out.extend(dirs.into_iter().map(|d| d.join("site-packages")));
    }
    out.push(venv.join("Lib").join("site-packages"));
    out
}

/// The shared library inside an installed `onnxruntime` package folder.
fn lib_in_package(pkg: &Path) -> Option<PathBuf> {
    let capi = pkg.join("capi");
    let entries = std::fs::read_dir(&capi).ok()?;
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let Some(n) = p.file_name().and_then(|n| n.to_str()) else {
                return false;
            };
            p.is_file()
                && (n.starts_with("libonnxruntime.so")
                    || (n.starts_with("libonnxruntime.") && n.ends_with(".dylib"))
                    || n == "onnxruntime.dll")
        })
        .collect();
    // Prefer the most specific name (libonnxruntime.so.1.32.0 over libonnxruntime.so).
    found.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    found.into_iter().next()
}

/// Asks an interpreter where its `onnxruntime` package is, without importing it.
fn ask_python(py: &Path) -> Option<PathBuf> {
    if py.components().count() > 1 && !py.is_file() {
        return None;
    }
    let out = Command::new(py)
        .args([
            "-c",
            "import importlib.util as u\n\
             s = u.find_spec('onnxruntime')\n\
             print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?;
    let s = s.trim();
    if s.is_empty() {
        None
    } else {
        Some(PathBuf::from(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_missing_is_an_error_naming_the_path() {
        let d = Discovery {
            explicit: Some(PathBuf::from("/nonexistent/libonnxruntime.so")),
            python: true,
            ..Discovery::default()
        };
        let e = find_onnxruntime(&d).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/libonnxruntime.so"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn nothing_found_says_how_to_get_it() {
        let d = Discovery::default();
        let e = find_onnxruntime(&d).unwrap_err().to_string();
        assert!(e.contains("pip install onnxruntime"), "{e}");
        assert!(e.contains(ORT_DYLIB_ENV), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn finds_library_in_a_fake_venv() {
        let dir = tempfile::tempdir().unwrap();
        let capi = dir
            .path()
            .join("lib/python3.11/site-packages/onnxruntime/capi");
        std::fs::create_dir_all(&capi).unwrap();
        std::fs::write(capi.join("libonnxruntime.so.1.99.0"), b"x").unwrap();
        std::fs::write(capi.join("libonnxruntime_providers_shared.so"), b"x").unwrap();
        let d = Discovery {
            python: true,
            venvs: vec![dir.path().to_path_buf()],
            ..Discovery::default()
        };
        assert_eq!(
            find_onnxruntime(&d).unwrap(),
            capi.join("libonnxruntime.so.1.99.0")
        );
    }
}
