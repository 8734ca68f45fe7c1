//! Finding the ONNX Runtime shared library: `ORT_DYLIB_PATH`, else the `onnxruntime`
//! Python package of, in order: the interpreter that runs the wheel's console script
//! (`ONNX_SAFEIFY_PYTHON`, which the script sets), an active virtualenv (`VIRTUAL_ENV`), the
//! project's venv (`ONNX_SAFEIFY_VENV`, else `$ONNX_SAFEIFY_CACHE/venv`, else
//! `~/.cache/onnx-safeify/venv`), or python3 on PATH.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::error::VerifyError;

/// Environment variable naming the ONNX Runtime library (the one `ort` itself uses).
pub const ORT_DYLIB_ENV: &str = "ORT_DYLIB_PATH";
/// Set to `1` to skip looking for a Python `onnxruntime` package.
pub const NO_PYTHON_DISCOVERY_ENV: &str = "ONNX_SAFEIFY_NO_PYTHON_DISCOVERY";
/// The project's Python venv (default `$ONNX_SAFEIFY_CACHE/venv`).
pub const VENV_ENV: &str = "ONNX_SAFEIFY_VENV";
/// The cache folder of the scripts (corpus, venv; default `$HOME/.cache/onnx-safeify`).
pub const CACHE_ENV: &str = "ONNX_SAFEIFY_CACHE";
/// The Python interpreter whose `onnxruntime` to use first: the wheel's console script sets
/// it to the interpreter that runs it (`sys.executable`), so that `onnx-safeify verify` finds
/// the onnxruntime installed beside it without the environment being activated.
pub const PYTHON_ENV: &str = "ONNX_SAFEIFY_PYTHON";

/// The inputs of library discovery, separated from the process environment so that it
/// can be tested without touching global state.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// An explicit library path (`--ort-library` or `ORT_DYLIB_PATH`); it must exist.
    pub explicit: Option<PathBuf>,
    /// Whether to look for a Python `onnxruntime` package at all.
    pub python: bool,
    /// The interpreter that runs the wheel's console script ([`PYTHON_ENV`]): asked first,
    /// and the environment a "not found" error tells to `pip install onnxruntime` into.
    pub own_python: Option<PathBuf>,
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
        let own_python = std::env::var_os(PYTHON_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
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
            own_python,
            venvs,
            interpreters,
        }
    }
}

/// The project's venv: `$ONNX_SAFEIFY_VENV`, else `$ONNX_SAFEIFY_CACHE/venv`, else
/// `$HOME/.cache/onnx-safeify/venv` (where `scripts/test.sh` puts it).
pub fn default_venv() -> PathBuf {
    venv_from(
        std::env::var_os(VENV_ENV),
        std::env::var_os(CACHE_ENV),
        std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE")),
    )
}

/// [`default_venv`] from the values of its variables (empty counts as unset).
fn venv_from(venv: Option<OsString>, cache: Option<OsString>, home: Option<OsString>) -> PathBuf {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(v) = set(venv) {
        return v;
    }
    if let Some(c) = set(cache) {
        return c.join("venv");
    }
    set(home)
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".cache")
        .join("onnx-safeify")
        .join("venv")
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
        if let Some(py) = &d.own_python {
            looked.push(py.display().to_string());
            if let Some(lib) = ask_python(py).and_then(|pkg| lib_in_package(&pkg)) {
                return Ok(lib);
            }
        }
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
    let get_it = match d.own_python.as_ref().filter(|_| d.python) {
        // The wheel's console script: onnxruntime belongs in the environment that runs it.
        Some(py) => format!(
            "`{} -m pip install onnxruntime` (into the Python environment that runs this \
             onnx-safeify; found automatically)",
            py.display()
        ),
        None => format!(
            "`python3 -m venv {venv} && {venv}/bin/pip install onnxruntime` (found \
             automatically), or `pip install onnxruntime` into an active virtualenv",
            venv = default_venv().display()
        ),
    };
    Err(VerifyError::RuntimeNotFound(format!(
        "ONNX Runtime was not found: {ORT_DYLIB_ENV} is not set and {searched}. To get it: \
         {get_it}, or set {ORT_DYLIB_ENV} to the libonnxruntime.so of an onnxruntime >= 1.24 \
         release"
    )))
}

/// The Python interpreter a helper process runs in (`--runtime ort-ep:NAME` and `openvino`, the
/// probe's case generator), searched as [`find_onnxruntime`] searches: the interpreter that runs
/// the wheel's console script, an active virtualenv, the project's venv, then `python3` and
/// `python` on PATH. The first one that has every package of `modules` (found without importing
/// them) is returned; the error names where it looked and, as [`find_onnxruntime`]'s does, the
/// environment to install them into.
pub fn find_python(d: &Discovery, modules: &[&str]) -> Result<PathBuf, VerifyError> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(py) = &d.own_python {
        candidates.push(py.clone());
    }
    for py in &d.interpreters {
        if !candidates.contains(py) {
            candidates.push(py.clone());
        }
    }
    let mut looked = Vec::new();
    for py in &candidates {
        // A path that does not exist is not an interpreter; a bare name is looked up on PATH.
        if py.components().count() > 1 && !py.is_file() {
            continue;
        }
        looked.push(py.display().to_string());
        if has_modules(py, modules) {
            return Ok(py.clone());
        }
    }
    let wanted = modules.join(" ");
    let get_it = match &d.own_python {
        Some(py) => format!(
            "`{} -m pip install {wanted}` (into the Python environment that runs this \
             onnx-safeify; found automatically)",
            py.display()
        ),
        None => format!(
            "`python3 -m venv {venv} && {venv}/bin/pip install {wanted}` (found \
             automatically), or `pip install {wanted}` into an active virtualenv",
            venv = default_venv().display()
        ),
    };
    let looked = if looked.is_empty() {
        "no Python interpreter found".to_string()
    } else {
        format!("looked in {}", looked.join(", "))
    };
    Err(VerifyError::RuntimeNotFound(format!(
        "no Python with the {} package{} found ({looked}). To get it: {get_it}",
        modules.join(", "),
        if modules.len() == 1 { "" } else { "s" },
    )))
}

/// Whether an interpreter has every package of `modules`, without importing them.
fn has_modules(py: &Path, modules: &[&str]) -> bool {
    let names = modules
        .iter()
        .map(|m| format!("{m:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    Command::new(py)
        .args([
            "-c",
            &format!(
                "import importlib.util as u, sys\n\
                 sys.exit(0 if all(u.find_spec(m) for m in ({names},)) else 1)"
            ),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
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
    fn the_venv_is_named_by_its_variable_else_under_the_cache_else_under_home() {
        let o = |s: &str| Some(OsString::from(s));
        assert_eq!(
            venv_from(o("/v"), o("/c"), o("/h")),
            PathBuf::from("/v"),
            "ONNX_SAFEIFY_VENV wins"
        );
        assert_eq!(
            venv_from(None, o("/c"), o("/h")),
            PathBuf::from("/c/venv"),
            "else the venv of ONNX_SAFEIFY_CACHE, where the scripts put it"
        );
        assert_eq!(
            venv_from(o(""), o(""), o("/h")),
            PathBuf::from("/h/.cache/onnx-safeify/venv"),
            "empty counts as unset"
        );
    }

    /// A stand-in interpreter: a script that prints `pkg` whatever it is asked.
    #[cfg(unix)]
    fn fake_python(dir: &Path, pkg: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let py = dir.join("python3");
        std::fs::write(&py, format!("#!/bin/sh\necho '{pkg}'\n")).unwrap();
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
        py
    }

    #[cfg(unix)]
    #[test]
    fn the_console_scripts_interpreter_is_asked_first() {
        let dir = tempfile::tempdir().unwrap();
        // Its onnxruntime, and another in a venv that would be found otherwise.
        let own = dir.path().join("own/onnxruntime");
        std::fs::create_dir_all(own.join("capi")).unwrap();
        std::fs::write(own.join("capi/libonnxruntime.so.1.32.0"), b"x").unwrap();
        let venv = dir.path().join("venv");
        let capi = venv.join("lib/python3.11/site-packages/onnxruntime/capi");
        std::fs::create_dir_all(&capi).unwrap();
        std::fs::write(capi.join("libonnxruntime.so.1.99.0"), b"x").unwrap();
        let d = Discovery {
            python: true,
            own_python: Some(fake_python(dir.path(), own.to_str().unwrap())),
            venvs: vec![venv.clone()],
            ..Discovery::default()
        };
        assert_eq!(
            find_onnxruntime(&d).unwrap(),
            own.join("capi/libonnxruntime.so.1.32.0")
        );
        // Without the variable, the venv's.
        let d = Discovery {
            own_python: None,
            ..d
        };
        assert_eq!(
            find_onnxruntime(&d).unwrap(),
            capi.join("libonnxruntime.so.1.99.0")
        );
    }

    #[cfg(unix)]
    #[test]
    fn without_onnxruntime_beside_the_console_script_the_error_says_pip_install_there() {
        let dir = tempfile::tempdir().unwrap();
        let py = fake_python(dir.path(), "");
        let d = Discovery {
            python: true,
            own_python: Some(py.clone()),
            ..Discovery::default()
        };
        let e = find_onnxruntime(&d).unwrap_err().to_string();
        assert!(
            e.contains(&format!("`{} -m pip install onnxruntime`", py.display())),
            "{e}"
        );
        assert!(e.contains("environment that runs this onnx-safeify"), "{e}");
        assert!(!e.contains(".cache/onnx-safeify/venv"), "{e}");
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
