//! The web harness that runs a model on onnxruntime-web's WebGPU provider in headless Chromium
//! (`verify --runtime webgpu`, `probe` and `bisect` on `webgpu`): its small scripts ship inside
//! the command, and `onnx-safeify setup webgpu` writes them into the cache folder
//! (`$ONNX_SAFEIFY_CACHE/webgpu`, default `~/.cache/onnx-safeify/webgpu`) and installs their
//! npm packages there, at the versions of `tools/webgpu/package-lock.json`. So an installed
//! command (a wheel, `cargo install`) finds it without the checkout it was built from.
//!
//! Where the harness is, first match: `$ONNX_SAFEIFY_WEBGPU_HARNESS`; the cache folder once
//! `setup webgpu` has installed it; `tools/webgpu` of the checkout this binary was built from,
//! where `scripts/setup-runtimes.sh` installed it; else the cache folder (not installed yet).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::discover::CACHE_ENV;
use super::error::VerifyError;

/// Overrides the folder of the web harness.
pub const HARNESS_ENV: &str = "ONNX_SAFEIFY_WEBGPU_HARNESS";

/// The harness's files, as in `tools/webgpu`: the scripts Node.js and the page run, and the
/// npm manifest and lock file `npm ci` installs from.
pub const FILES: &[(&str, &str)] = &[
    ("run.mjs", include_str!("../../../tools/webgpu/run.mjs")),
    ("page.html", include_str!("../../../tools/webgpu/page.html")),
    ("page.mjs", include_str!("../../../tools/webgpu/page.mjs")),
    (
        "package.json",
        include_str!("../../../tools/webgpu/package.json"),
    ),
    (
        "package-lock.json",
        include_str!("../../../tools/webgpu/package-lock.json"),
    ),
];

/// The npm packages the harness needs (in `node_modules`).
pub const PACKAGES: &[&str] = &["onnxruntime-web", "playwright-core"];

/// The command that installs the harness, for error messages.
pub const SETUP_COMMAND: &str = "onnx-safeify setup webgpu";

/// `$ONNX_SAFEIFY_CACHE/webgpu`, else `$HOME/.cache/onnx-safeify/webgpu`.
pub fn cache_dir() -> PathBuf {
    let set = |v: Option<std::ffi::OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    match set(std::env::var_os(CACHE_ENV)) {
        Some(c) => c.join("webgpu"),
        None => set(std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE")))
            .unwrap_or_else(|| PathBuf::from("."))
            .join(".cache")
            .join("onnx-safeify")
            .join("webgpu"),
    }
}

/// `tools/webgpu` of the checkout this binary was built from (absent on another machine).
fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/webgpu")
}

/// Whether `dir` holds the harness's npm packages.
pub fn installed(dir: &Path) -> bool {
    PACKAGES.iter().all(|p| {
        dir.join("node_modules")
            .join(p)
            .join("package.json")
            .is_file()
    })
}

/// The harness folder (see the module docs for the order).
pub fn dir() -> PathBuf {
    choose(
        std::env::var_os(HARNESS_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        cache_dir(),
        source_dir(),
    )
}

/// [`dir`] from its inputs.
fn choose(explicit: Option<PathBuf>, cache: PathBuf, source: PathBuf) -> PathBuf {
    if let Some(p) = explicit {
        return p;
    }
    if installed(&cache) || !installed(&source) {
        return cache;
    }
    source
}

/// Writes the shipped scripts into `dir` where they are missing or differ (a newer command
/// brings newer scripts; the installed packages stay).
pub fn write_scripts(dir: &Path) -> Result<(), VerifyError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        VerifyError::RuntimeNotFound(format!("cannot create {}: {e}", dir.display()))
    })?;
    for (name, text) in FILES {
        let path = dir.join(name);
        if std::fs::read(&path).is_ok_and(|b| b == text.as_bytes()) {
            continue;
        }
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                VerifyError::RuntimeNotFound(format!("cannot write {}: {e}", path.display()))
            })?;
    }
    Ok(())
}

/// `onnx-safeify setup webgpu`: writes the scripts into the harness folder ([`dir`], the cache
/// folder unless `$ONNX_SAFEIFY_WEBGPU_HARNESS` names another) and runs `npm ci` there.
/// Returns what was done, for the user.
pub fn setup() -> Result<String, VerifyError> {
    let explicit = std::env::var_os(HARNESS_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let dir = explicit.unwrap_or_else(cache_dir);
    write_scripts(&dir)?;
    let npm = std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("npm"))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| {
            VerifyError::RuntimeNotFound(format!(
                "setup webgpu needs npm (Node.js 20 or later with npm, on PATH) to install {} \
                 into {}",
                PACKAGES.join(" and "),
                dir.display()
            ))
        })?;
    // npm's own output goes to our stderr: the download can take a while.
    let status = Command::new(&npm)
        .args([
            "ci",
            // Nothing to build, and playwright must not download browsers of its own.
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| VerifyError::RuntimeNotFound(format!("cannot run {}: {e}", npm.display())))?;
    if !status.success() || !installed(&dir) {
        return Err(VerifyError::RuntimeNotFound(format!(
            "`npm ci` in {} failed ({status}); it needs access to the npm registry",
            dir.display()
        )));
    }
    Ok(format!(
        "installed the web harness in {} ({})\n",
        dir.display(),
        PACKAGES.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_wins_then_an_installed_cache_then_an_installed_checkout() {
        let t = tempfile::tempdir().unwrap();
        let (cache, source) = (t.path().join("cache"), t.path().join("source"));
        let install = |d: &Path| {
            for p in PACKAGES {
                let m = d.join("node_modules").join(p);
                std::fs::create_dir_all(&m).unwrap();
                std::fs::write(m.join("package.json"), "{}").unwrap();
            }
        };
        let x = t.path().join("x");
        assert_eq!(choose(Some(x.clone()), cache.clone(), source.clone()), x);
        // Nothing installed: the cache folder, which the error names and setup fills.
        assert_eq!(choose(None, cache.clone(), source.clone()), cache);
        install(&source);
        assert_eq!(choose(None, cache.clone(), source.clone()), source);
        install(&cache);
        assert_eq!(choose(None, cache.clone(), source.clone()), cache);
    }

    #[test]
    fn the_scripts_are_written_and_rewritten_when_they_differ() {
        let t = tempfile::tempdir().unwrap();
        write_scripts(t.path()).unwrap();
        std::fs::write(t.path().join("run.mjs"), "old").unwrap();
        write_scripts(t.path()).unwrap();
        for (name, text) in FILES {
            assert_eq!(std::fs::read_to_string(t.path().join(name)).unwrap(), *text);
        }
    }
}
