//! What a new user meets first: a bare invocation, the exit codes `--help` and the manual
//! promise (the README's), a built-in target named like a file, and `doctor`'s advice.

mod common;

use std::process::Command;

use common::{bin, repo, sample};

fn cli(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(bin())
        .args(args)
        .current_dir(repo())
        .output()
        .expect("the binary runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Text with runs of whitespace (line breaks, roff escapes of hyphens aside) made single spaces.
fn flat(s: &str) -> String {
    s.replace("\\-", "-")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn a_bare_invocation_prints_usage_and_exits_2() {
    let (code, out, err) = cli(&[]);
    assert_eq!(code, 2);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("Usage: onnx-safeify"), "{err}");
    assert!(err.contains("check"), "the subcommands are listed: {err}");
}

#[test]
fn help_and_man_state_the_readme_exit_codes() {
    let readme = flat(&std::fs::read_to_string(repo().join("README.md")).unwrap());
    let promise = "1 findings (check), a denied node or an action that cannot be applied and no fallback takes it (compile";
    assert!(
        readme.contains(&promise.replace("1 findings (check)", "`1` findings (`check`)")),
        "the README states the exit codes"
    );
    let (code, help, _) = cli(&["--help"]);
    assert_eq!(code, 0);
    let help = flat(&help);
    assert!(help.contains(promise), "{help}");
    assert!(help.contains("2 any error"), "{help}");
    let (code, man, _) = cli(&["man"]);
    assert_eq!(code, 0);
    assert!(flat(&man).contains(promise), "the man page says the same");
}

#[test]
fn a_missing_rules_file_named_like_a_builtin_suggests_the_builtin() {
    let s = sample();
    let s = s.to_str().unwrap();
    for spec in ["rx580.yaml", "rules/directml.yml"] {
        let (code, _, err) = cli(&["check", s, "--target", spec]);
        assert_eq!(code, 2, "{err}");
        let stem = spec.rsplit('/').next().unwrap().split('.').next().unwrap();
        assert!(
            err.contains(&format!(
                "help: `{stem}` is a built-in target: use --target {stem}"
            )),
            "{spec}: {err}"
        );
    }
    // An existing file is read as a file; an unknown stem gets no hint.
    let (code, _, err) = cli(&["check", s, "--target", "no-such-gpu.yaml"]);
    assert_eq!(code, 2);
    assert!(!err.contains("use --target"), "{err}");
    let (code, _, _) = cli(&["check", s, "--target", "rules/rx580.yaml"]);
    assert_eq!(code, 1, "the shipped rules file itself loads");
}

#[test]
fn doctor_names_the_model_in_its_try_line() {
    let log = repo().join("tests/data/logs/dxgi_device_removed.log");
    let log = log.to_str().unwrap();
    let (code, out, err) = cli(&["doctor", log, "samples/ocr_tiny.onnx"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("try:      onnx-safeify samples/ocr_tiny.onnx --target rx580"),
        "{out}"
    );
    // Without a model the placeholder stays; a path with a space is quoted for the shell.
    let (_, out, _) = cli(&["doctor", log]);
    assert!(
        out.contains("try:      onnx-safeify MODEL --target rx580"),
        "{out}"
    );
    let dir = tempfile::tempdir().unwrap();
    let spaced = dir.path().join("my model.onnx");
    std::fs::copy(sample(), &spaced).unwrap();
    let (code, out, err) = cli(&["doctor", log, spaced.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("onnx-safeify '{}' --target", spaced.display())),
        "{out}"
    );
}

#[test]
fn doctor_puts_the_node_the_log_names_first_with_the_rule_that_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("named.log");
    std::fs::write(
        &log,
        "2025-03-14 09:12:47.118 [E:onnxruntime:, sequential_executor.cc:516] Non-zero status \
         code returned while running Conv node. Name:'backbone.block3.dw.conv' Status Message: \
         887A0005 The GPU device instance has been suspended.\n",
    )
    .unwrap();
    let log = log.to_str().unwrap();
    let (code, out, err) = cli(&["doctor", log, "samples/ocr_tiny.onnx"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("  node:     backbone.block3.dw.conv (Conv), named in the log"),
        "{out}"
    );
    assert!(
        out.contains(
            "  covered:  rx580 rule split-depthwise (split {axis: channels, max: 64}) matches it"
        ),
        "{out}"
    );
    // The named node alone: not the list of every Conv.
    assert!(!out.contains("nodes ("), "{out}");
    let (code, json, _) = cli(&["doctor", log, "samples/ocr_tiny.onnx", "--format", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let d = &v["diagnoses"][0];
    assert_eq!(d["named_in_log"], true, "{json}");
    assert_eq!(d["nodes"].as_array().unwrap().len(), 1, "{json}");
    assert_eq!(d["covered_by"][0]["target"], "rx580", "{json}");
    // A name the model lacks (the runtime's fused partition) keeps the list of implicated nodes.
    let other = repo().join("tests/data/logs/dxgi_device_removed.log");
    let (_, out, _) = cli(&["doctor", other.to_str().unwrap(), "samples/ocr_tiny.onnx"]);
    assert!(out.contains("nodes ("), "{out}");
    assert!(!out.contains("named in the log"), "{out}");
}

#[test]
fn partition_refuses_an_onnx_name_for_its_yaml_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("part.onnx");
    let (code, _, err) = cli(&[
        sample().to_str().unwrap(),
        "--target",
        "rx580",
        "--cpu-subgraphs",
        "partition",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("YAML manifest") && err.contains("part.yaml"),
        "{err}"
    );
    // Nothing written.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let yaml = dir.path().join("part.yaml");
    let (code, _, err) = cli(&[
        sample().to_str().unwrap(),
        "--target",
        "rx580",
        "--cpu-subgraphs",
        "partition",
        "-o",
        yaml.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read_to_string(&yaml)
        .unwrap()
        .contains("segments:"));
}

#[test]
fn compile_exits_1_when_a_node_is_denied() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("deny.yaml");
    std::fs::write(
        &rules,
        "rules:\n  - id: no-conv\n    why: test\n    evidence: []\n    match: {op: Conv}\n    action: deny\n",
    )
    .unwrap();
    let out = dir.path().join("out.onnx");
    let s = sample();
    let (code, _, err) = cli(&[
        s.to_str().unwrap(),
        "--target",
        "rx580",
        "--rules",
        rules.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nothing was written"), "{err}");
    assert!(!out.exists());
}

#[test]
fn a_graph_wide_finding_prints_no_empty_op() {
    // A budget far below the sample's work: `check` reports the piece over budget, a finding
    // that names where the piece starts and has no op of its own.
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("tiny-budget.yaml");
    std::fs::write(
        &rules,
        "rules:\n  - id: tiny-budget\n    why: test\n    evidence: []\n    match: {op: Conv}\n    action: {barrier: {budget: 1e3, dims: {batch: 1}}}\n",
    )
    .unwrap();
    let s = sample();
    let (code, out, err) = cli(&[
        "check",
        s.to_str().unwrap(),
        "--target",
        "none",
        "--rules",
        rules.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    let over: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("[over-budget]"))
        .collect();
    assert!(!over.is_empty(), "{out}");
    for l in over {
        assert!(!l.contains("()"), "an empty op is printed as `()`: {l}");
        assert!(
            l.starts_with("  - ") && l.contains(" [over-budget]: "),
            "{l}"
        );
    }
    // Node findings keep their op.
    let (_, out, _) = cli(&["check", s.to_str().unwrap(), "--target", "rx580"]);
    assert!(out.contains("  - backbone.block3.dw.conv (Conv)"), "{out}");
}

/// The `--long` options a subcommand's `--help` lists.
fn long_options(help: &str) -> Vec<String> {
    let mut out: Vec<String> = help
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("-h, ").unwrap_or(l);
            let opt = l.strip_prefix("--")?;
            let name: String = opt
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty()).then(|| format!("--{name}"))
        })
        .collect();
    out.dedup();
    out
}

#[test]
fn the_readme_usage_of_verify_names_every_option() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let usage = readme
        .split("## Usage")
        .nth(1)
        .and_then(|u| u.split("```").nth(1))
        .expect("the README has a usage block");
    // The usage lines of `verify`: its own line and the indented ones after it.
    let mut verify = String::new();
    let mut inside = false;
    for l in usage.lines() {
        if l.starts_with("onnx-safeify ") {
            inside = l.starts_with("onnx-safeify verify ");
        }
        if inside {
            verify.push_str(l);
            verify.push('\n');
        }
    }
    assert!(!verify.is_empty(), "{usage}");
    let (code, help, err) = cli(&["verify", "--help"]);
    assert_eq!(code, 0, "{err}");
    let options = long_options(&help);
    assert!(options.contains(&"--float-range".to_string()), "{help}");
    for o in options.iter().filter(|o| *o != "--help") {
        assert!(
            verify.contains(&format!("[{o}")) || verify.contains(&format!(" {o} ")),
            "the README's usage of verify omits {o}:\n{verify}"
        );
    }
}

/// scripts/setup-runtimes.sh on a machine with none of what it installs from (no apt-get,
/// no Node.js, no venv): it says what is missing and exits 3, for scripts/test.sh to let the
/// runtime tests skip; under CI (CI=true) the same is a failure, exit 2.
#[cfg(unix)]
#[test]
fn setup_skips_what_it_cannot_install_and_ci_fails_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir_all(root.join("scripts")).unwrap();
    std::fs::create_dir_all(root.join("tools/webgpu")).unwrap();
    std::fs::copy(
        repo().join("scripts/setup-runtimes.sh"),
        root.join("scripts/setup-runtimes.sh"),
    )
    .unwrap();
    std::fs::copy(
        repo().join("tools/webgpu/package-lock.json"),
        root.join("tools/webgpu/package-lock.json"),
    )
    .unwrap();
    // A PATH with the shell tools the script uses, and nothing it installs or installs with.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let which = |t: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join(t))
            .find(|p| p.is_file())
    };
    for t in ["bash", "env", "id", "cmp", "cp", "dirname", "cat"] {
        if let Some(p) = which(t) {
            std::os::unix::fs::symlink(p, bin.join(t)).unwrap();
        }
    }
    let Some(bash) = which("bash") else {
        eprintln!("SKIPPED: no bash on PATH to run scripts/setup-runtimes.sh");
        return;
    };
    let run = |ci: bool| {
        let mut c = Command::new(&bash);
        c.arg(root.join("scripts/setup-runtimes.sh"))
            .env_clear()
            .env("HOME", dir.path())
            .env("PATH", &bin)
            .env("ONNX_SAFEIFY_CACHE", dir.path().join("cache"))
            .stdin(std::process::Stdio::null());
        if ci {
            c.env("CI", "true");
        }
        let o = c.output().unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(false);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("NOT INSTALLED (webgpu): Chromium"), "{err}");
    assert!(
        err.contains("NOT INSTALLED (webgpu): Node.js 20 or later with npm"),
        "{err}"
    );
    assert!(err.contains("NOT INSTALLED (openvino): the venv"), "{err}");
    assert!(
        err.contains("cache/venv"),
        "the venv is under ONNX_SAFEIFY_CACHE: {err}"
    );
    assert!(err.contains("will be skipped"), "{err}");
    let (code, err) = run(true);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("CI=true: every runtime is required"), "{err}");
}

/// The tour's setup builds the corpus before it copies from it, and works in a scratch folder
/// outside the checkout; the README says what the first runs cost.
#[test]
fn the_tour_builds_the_corpus_first_and_leaves_the_checkout_alone() {
    let tour = std::fs::read_to_string(repo().join("docs/tour.md")).unwrap();
    let corpus = tour
        .find("\nscripts/corpus.sh")
        .expect("the tour runs scripts/corpus.sh");
    let copy = tour.find("cp \"$CORPUS\"").unwrap();
    assert!(corpus < copy, "scripts/corpus.sh comes after the copy");
    assert!(
        !tour.contains("mkdir tour"),
        "the tour makes a folder in the checkout"
    );
    assert!(tour.contains("mktemp -d"));
    let readme = flat(&std::fs::read_to_string(repo().join("README.md")).unwrap());
    for figure in ["about 4 minutes on 2 cores", "229 packages and 290 MB"] {
        assert!(readme.contains(figure), "the README omits '{figure}'");
    }
}

/// A command whose stdout and stderr are closed (`2>&1 | head -1` once head has its line)
/// keeps its exit code: `check` with findings exits 1, not 101 (a panic on the closed pipe).
#[cfg(unix)]
#[test]
fn a_closed_pipe_ends_the_output_and_keeps_the_exit_code() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.onnx");
    for args in [
        // The compile's summary goes to stderr, its runtime settings to stdout.
        vec![
            "samples/ocr_tiny.onnx",
            "--target",
            "rx580",
            "-o",
            out.to_str().unwrap(),
        ],
        vec!["check", "samples/ocr_tiny.onnx", "--target", "rx580"],
        vec!["targets"],
    ] {
        let mut child = Command::new(bin())
            .args(&args)
            .current_dir(repo())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close both read ends before the command writes anything.
        drop(child.stdout.take());
        drop(child.stderr.take());
        let code = child.wait().unwrap().code();
        let want = if args[0] == "check" { 1 } else { 0 };
        assert_eq!(code, Some(want), "{args:?}");
    }
}

/// An unknown target is one line that says so (with the nearest built-in), exit 2: not a
/// rule-file error.
#[test]
fn an_unknown_target_is_one_line() {
    let (code, out, err) = cli(&["samples/ocr_tiny.onnx", "--target", "rx58"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(
        err,
        "error: unknown target `rx58`: not a built-in target and no such file (did you mean `rx580`?); `onnx-safeify targets` lists the built-in targets\n"
    );
}

/// A file cut short (a copy or download that stopped, or one still being written) is said to
/// end early, with its size; not "buffer underflow".
#[test]
fn a_truncated_model_is_said_to_end_early() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(sample()).unwrap();
    let cut = dir.path().join("cut.onnx");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let size = bytes.len() / 2;
    for args in [
        vec![cut.to_str().unwrap(), "--target", "rx580"],
        vec!["inspect", cut.to_str().unwrap()],
        vec!["verify", cut.to_str().unwrap(), cut.to_str().unwrap()],
    ] {
        let (code, _, err) = cli(&args);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("the file ends early") && err.contains(&format!("its {size} bytes")),
            "{args:?}: {err}"
        );
        assert!(!err.contains("underflow"), "{err}");
    }
}

/// A `--dim` name no input has is warned about, naming the dimensions the model has: by
/// compile and `check` as by `verify`.
#[test]
fn an_unknown_dim_name_is_warned_about_naming_the_models_dims() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.onnx");
    let s = sample();
    let want = format!(
        "warning: --dim bogus: no input of {} has a dimension named 'bogus' (its inputs' dimensions are named N)",
        s.display()
    );
    let (code, _, err) = cli(&[
        s.to_str().unwrap(),
        "--target",
        "rx580",
        "--dim",
        "bogus=3",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(&want), "{err}");
    let (_, _, err) = cli(&[
        "check",
        s.to_str().unwrap(),
        "--target",
        "rx580",
        "--dim",
        "bogus=3",
    ]);
    assert!(err.contains(&want), "{err}");
    let (_, _, err) = cli(&[
        s.to_str().unwrap(),
        "--target",
        "none",
        "--dim",
        "x[9]=3",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(
        err.contains(&format!(
            "warning: --dim x[9]: {} has no such input axis",
            s.display()
        )),
        "{err}"
    );
    // A model with named dims lists them.
    let model = onnx_safeify::analysis::unknown_dim_warning(
        "bogus",
        std::path::Path::new("m.onnx"),
        &["batch".to_string(), "height".to_string()],
    );
    assert_eq!(
        model,
        "--dim bogus: no input of m.onnx has a dimension named 'bogus' (its inputs' dimensions are named batch, height)"
    );
}

/// `probe` and `bisect --runtime ort-ep:NAME` find ONNX Runtime as `verify` does: first in the
/// Python environment the command runs from (the wheel's console script names its interpreter
/// in ONNX_SAFEIFY_PYTHON), not only in the cache venv.
#[test]
fn probe_and_bisect_use_the_environment_the_command_runs_in() {
    let Some(py) = common::venv_python() else {
        eprintln!("SKIPPED: no venv with onnxruntime (run scripts/corpus.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let o = Command::new(bin())
            .args(args)
            .current_dir(repo())
            .env("ONNX_SAFEIFY_PYTHON", &py)
            .env("ONNX_SAFEIFY_VENV", dir.path().join("no-such-venv"))
            .env_remove("VIRTUAL_ENV")
            .env_remove("ORT_DYLIB_PATH")
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    let target = dir.path().join("learned.yaml");
    let (code, text) = run(&[
        "probe",
        "--runtime",
        "ort-ep:CPUExecutionProvider",
        "--only",
        "TopK",
        "-o",
        target.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = run(&[
        "bisect",
        "samples/ocr_tiny.onnx",
        "--runtime",
        "ort-ep:CPUExecutionProvider",
    ]);
    assert_ne!(code, Some(2), "{text}");
    assert!(!text.contains("no-such-venv"), "{text}");
}

/// `setup webgpu` writes the web harness that ships inside the command into the cache folder
/// and installs its npm packages there (`npm ci`, faked here), where `verify --runtime webgpu`
/// then finds it, without the checkout's tools/webgpu. Before it, the error names the command
/// and ONNX_SAFEIFY_WEBGPU_HARNESS.
#[cfg(unix)]
#[test]
fn setup_webgpu_installs_the_harness_into_the_cache_folder() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let npm = bin_dir.join("npm");
    std::fs::write(
        &npm,
        "#!/bin/sh\necho \"$@\" > npm-args\nfor p in onnxruntime-web playwright-core; do mkdir -p node_modules/$p && echo '{}' > node_modules/$p/package.json; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&npm, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(
        std::iter::once(bin_dir.clone()).chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .unwrap();
    let cache = dir.path().join("cache");
    // ONNX Runtime for the reference run, where the cache folder no longer leads to it.
    let venv = common::venv_python()
        .and_then(|p| Some(p.parent()?.parent()?.to_path_buf()))
        .unwrap_or_default();
    let run = |args: &[&str]| {
        let o = Command::new(bin())
            .args(args)
            .current_dir(repo())
            .env("PATH", &path)
            .env("ONNX_SAFEIFY_CACHE", &cache)
            .env("ONNX_SAFEIFY_VENV", &venv)
            .env_remove("ONNX_SAFEIFY_WEBGPU_HARNESS")
            .env("ONNX_SAFEIFY_NODE", "/bin/sh")
            .env("ONNX_SAFEIFY_CHROMIUM", dir.path().join("no-chromium"))
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let s = sample();
    let verify = [
        "verify",
        s.to_str().unwrap(),
        s.to_str().unwrap(),
        "--runtime",
        "webgpu",
    ];
    let checkout_has_it = repo()
        .join("tools/webgpu/node_modules/onnxruntime-web/package.json")
        .is_file();
    if !checkout_has_it {
        let (code, _, err) = run(&verify);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains("`onnx-safeify setup webgpu`")
                && err.contains("ONNX_SAFEIFY_WEBGPU_HARNESS"),
            "{err}"
        );
    }
    let (code, out, err) = run(&["setup", "webgpu"]);
    assert_eq!(code, Some(0), "{err}");
    let harness = cache.join("webgpu");
    assert!(out.contains(&harness.display().to_string()), "{out}");
    for f in [
        "run.mjs",
        "page.html",
        "page.mjs",
        "package.json",
        "package-lock.json",
    ] {
        assert_eq!(
            std::fs::read(harness.join(f)).unwrap(),
            std::fs::read(repo().join("tools/webgpu").join(f)).unwrap(),
            "{f}"
        );
    }
    let args = std::fs::read_to_string(harness.join("npm-args")).unwrap();
    assert!(args.starts_with("ci "), "{args}");
    // The harness is found; what is missing now is Chromium.
    let (code, _, err) = run(&verify);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("needs Chromium"), "{err}");
}
