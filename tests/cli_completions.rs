//! Shell completions and the manual page, generated from the command-line definition.

mod common;

use std::process::Command;

use common::bin;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(bin())
        .args(args)
        .output()
        .expect("the binary runs");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const SUBCOMMANDS: [&str; 9] = [
    "check",
    "explain",
    "targets",
    "inspect",
    "verify",
    "doctor",
    "setup",
    "completions",
    "man",
];

#[test]
fn bash_completions_name_every_subcommand() {
    let (code, out, err) = run(&["completions", "bash"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("complete -F"), "not a bash completion script");
    for sub in SUBCOMMANDS {
        assert!(out.contains(sub), "bash completions lack `{sub}`");
    }
    // Options of the main command and of subcommands.
    for opt in [
        "--target",
        "--cpu-subgraphs",
        "--dot",
        "--format",
        "--allow-unsafe",
    ] {
        assert!(out.contains(opt), "bash completions lack `{opt}`");
    }
}

#[test]
fn every_shell_gets_a_script() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let (code, out, err) = run(&["completions", shell]);
        assert_eq!(code, Some(0), "{shell}: {err}");
        assert!(out.contains("onnx-safeify"), "{shell}: no command name");
        assert!(out.contains("inspect"), "{shell}: no subcommands");
    }
    let (code, _, _) = run(&["completions", "tcsh"]);
    assert_eq!(code, Some(2), "an unknown shell is a usage error");
}

#[test]
fn man_page_is_roff() {
    let (code, out, err) = run(&["man"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with(".TH onnx-safeify 1"),
        "{}",
        &out[..out.len().min(200)]
    );
    assert!(out.contains(".SH NAME"));
    assert!(out.contains(".SH SYNOPSIS"));
    assert!(out.contains("\\-\\-target"));
    for sub in SUBCOMMANDS {
        assert!(out.contains(sub), "the man page lacks `{sub}`");
    }
}

#[test]
fn man_page_of_a_subcommand() {
    let (code, out, err) = run(&["man", "check"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with(".TH onnx-safeify-check 1"));
    assert!(out.contains("\\-\\-format"));
    let (code, _, err) = run(&["man", "nonesuch"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no subcommand 'nonesuch'"), "{err}");
}
