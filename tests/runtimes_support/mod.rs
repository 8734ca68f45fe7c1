//! Shared helpers of the tests that run models on WebGPU (headless Chromium) and OpenVINO:
//! whether those runtimes are installed, and the `verify` / compile commands.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use onnx_safeify::runtime::run::external::check_available;
use onnx_safeify::verify::RuntimeKind;

/// Set to `1` to skip (loudly) the tests of a runtime that is not installed; without it a
/// missing runtime fails the test.
pub const ALLOW_MISSING: &str = "ONNX_SAFEIFY_ALLOW_MISSING_RUNTIMES";

/// True when `kind` is installed. When it is not: panics, unless ALLOW_MISSING=1, then prints
/// a loud skip message and returns false.
pub fn ready(kind: RuntimeKind) -> bool {
    match check_available(&kind) {
        Ok(()) => true,
        Err(e) => {
            if std::env::var(ALLOW_MISSING).as_deref() == Ok("1") {
                // Straight to the process's stderr: `eprintln!` in a test that passes is
                // captured, and a skip must be seen.
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "\n!!!!!!!! SKIPPED: runtime {} is not installed ({ALLOW_MISSING}=1): {e}\n",
                    kind.name()
                );
                false
            } else {
                panic!(
                    "runtime {} is not installed: {e} (or set {ALLOW_MISSING}=1 to skip these tests)",
                    kind.name()
                )
            }
        }
    }
}

/// The result of a command: exit code, stdout, stderr.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut c = Command::new(env!("CARGO_BIN_EXE_onnx-safeify"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("onnx-safeify runs");
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// `onnx-safeify verify A B --runtime R --format json EXTRA...`; returns the exit code and
/// the parsed report (None when the command printed no report, i.e. exit 2).
pub fn verify_json(
    a: &Path,
    b: &Path,
    runtime: &str,
    extra: &[&str],
) -> (i32, Option<serde_json::Value>, Out) {
    let mut args = vec![
        "verify",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--runtime",
        runtime,
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = run(&args, &[]);
    let json = serde_json::from_str(&out.stdout).ok();
    (out.code, json, out)
}

/// `onnx-safeify MODEL --target TARGET -o OUT`, which must succeed.
pub fn compile(model: &Path, target: &str, out: &Path) {
    let o = run(
        &[
            model.to_str().unwrap(),
            "--target",
            target,
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(
        o.code,
        0,
        "compile {} for {target}: {}",
        model.display(),
        o.stderr
    );
}

/// Nodes per provider, as (provider, nodes).
pub type Providers = Vec<(String, u64)>;
/// CPU nodes, as (name, op, pinned).
pub type CpuNodes = Vec<(String, String, bool)>;

/// The placement in a report: (provider -> nodes, CPU nodes as (name, op, pinned)).
pub fn placement(report: &serde_json::Value) -> (Providers, CpuNodes) {
    let p = &report["rewritten_runtime"]["placement"];
    let providers = p["providers"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["provider"].as_str().unwrap_or("").to_string(),
                        e["nodes"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let cpu = p["cpu_nodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap_or("").to_string(),
                        e["op"].as_str().unwrap_or("").to_string(),
                        e["pinned"].as_bool().unwrap_or(false),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    (providers, cpu)
}

/// Nodes placed on `provider` according to the report.
pub fn count(report: &serde_json::Value, provider: &str) -> u64 {
    placement(report)
        .0
        .iter()
        .filter(|(p, _)| p == provider)
        .map(|(_, n)| n)
        .sum()
}

/// Helper processes left over by this test: processes whose environment carries the helper
/// tag (`ONNX_SAFEIFY_HELPER_TAG=<owner pid>-<work folder>`) of this test process, or of an
/// owner that has exited (a command the test ran, gone, whose helper lives on). Helpers of
/// other live onnx-safeify processes on the machine (another suite, a table being made) are
/// not this test's.
pub fn tagged_processes() -> Vec<u32> {
    const KEY: &[u8] = b"ONNX_SAFEIFY_HELPER_TAG=";
    let mut out = Vec::new();
    let me = std::process::id();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let Some(tag) = env.split(|b| *b == 0).find_map(|kv| kv.strip_prefix(KEY)) else {
            continue;
        };
        let owner = String::from_utf8_lossy(tag)
            .split('-')
            .next()
            .and_then(|p| p.parse::<u32>().ok());
        let ours = match owner {
            Some(o) => o == me || !std::path::Path::new(&format!("/proc/{o}")).exists(),
            None => true,
        };
        if ours {
            out.push(pid);
        }
    }
    out
}
