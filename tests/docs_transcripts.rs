//! The command outputs shown in `docs/*.md` are real: every fenced block whose first line
//! starts with `$ ` is a transcript, and this test runs its commands and compares.
//!
//! - Lines starting with `$ ` are commands (run by `sh` in a scratch folder, stderr merged
//!   into stdout, with `onnx-safeify` on `PATH`); the lines after one, up to the next command
//!   or the end of the block, are its output.
//! - A line `[...]` stands for any number of lines (the page shortens a long output).
//! - Before comparing, figures that change from run to run or machine to machine are masked
//!   on both sides: the milliseconds of `wrote ... in N ms`, and the library path on
//!   `verify`'s `runtime:` line.
//! - The blocks of one page run in order in one scratch folder, which holds the sample
//!   (`ocr_tiny.onnx`), `docs/examples/*`, the corpus' PP-OCRv4 detector
//!   (`ch_PP-OCRv4_det_infer.onnx`) and the shipped `samples/page.npz` (made by
//!   [`page_npy`]; a test checks the shipped file is what it makes).
//!
//! `scripts/docs.sh` regenerates the pages (`ONNX_SAFEIFY_UPDATE_DOCS=1`): a block whose output
//! no longer matches is replaced by the full new output (shorten it again with `[...]` by
//! hand); blocks that match are left as they are.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const PAGES: &[&str] = &[
    "docs/tour.md",
    "docs/targets.md",
    "docs/rules.md",
    "docs/deploy.md",
    "docs/pipelines.md",
];
const ELISION: &str = "[...]";

/// One transcript block: where it is, and its commands with their shown output.
struct Block {
    /// 0-based line of the first command (the line after the opening fence).
    start: usize,
    /// 0-based line of the closing fence.
    end: usize,
    steps: Vec<(String, Vec<String>)>,
}

fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_end();
        let plain = fence == "```" || fence == "```console";
        if plain && lines.get(i + 1).is_some_and(|l| l.starts_with("$ ")) {
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && !lines[end].starts_with("```") {
                end += 1;
            }
            let mut steps: Vec<(String, Vec<String>)> = Vec::new();
            for l in &lines[start..end] {
                match l.strip_prefix("$ ") {
                    Some(cmd) => steps.push((cmd.to_string(), Vec::new())),
                    None => steps.last_mut().unwrap().1.push(l.to_string()),
                }
            }
            out.push(Block { start, end, steps });
            i = end + 1;
        } else if fence.starts_with("```") {
            // Skip any other fenced block whole (a `$` inside it is not a transcript).
            i += 1;
            while i < lines.len() && !lines[i].starts_with("```") {
                i += 1;
            }
            i += 1;
        } else {
            i += 1;
        }
    }
    out
}

/// Masks the parts of a line that differ between runs and machines.
fn mask(line: &str) -> String {
    let mut s = line.trim_end().to_string();
    // Where ONNX Runtime was loaded from (`runtime:`, or `reference:` with `--runtime`).
    for label in ["runtime:", "reference:"] {
        if let Some(rest) = s.strip_prefix(label) {
            if let (Some(a), Some(b)) = (rest.find(" ("), rest.rfind("), ")) {
                if a < b {
                    s = format!("{label}{} (LIBRARY){}", &rest[..a], &rest[b + 1..]);
                }
            }
        }
    }
    if let Some(i) = s.find("\"library\": \"") {
        // verify --format json: where ONNX Runtime was loaded from.
        s = format!("{}\"library\": \"LIBRARY\",", &s[..i]);
    }
    if s.starts_with("wrote ") && s.ends_with(" ms") {
        if let Some(i) = s.rfind(" in ") {
            s = format!("{} in N ms", &s[..i]);
        }
    }
    s
}

/// Does one shown line match an actual one? Both are masked; `[...]` inside a line stands for
/// any text.
fn line_matches(shown: &str, actual: &str) -> bool {
    let (shown, actual) = (mask(shown), mask(actual));
    let parts: Vec<&str> = shown.split(ELISION).collect();
    if parts.len() == 1 {
        return shown == actual;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !actual.starts_with(first) || actual.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &actual[first.len()..actual.len() - last.len()];
    if !actual.ends_with(last) {
        return false;
    }
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(i) => rest = &rest[i + middle.len()..],
            None => return false,
        }
    }
    true
}

/// Do the shown lines (with `[...]`) match the actual ones?
fn matches(shown: &[String], actual: &[String]) -> bool {
    match shown.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == ELISION => {
            (0..=actual.len()).any(|k| matches(rest, &actual[k..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(a, more)| line_matches(first, a) && matches(rest, more)),
    }
}

/// A 640x640 page of dark text lines on white, normalised as PaddleOCR's detector expects
/// (scale to [0, 1], subtract the ImageNet mean, divide by its deviation): the `.npy` of one
/// float32 array of shape [1, 3, 640, 640], which `samples/page.npz` holds as `x`.
fn page_npy() -> Vec<u8> {
    const SIDE: usize = 640;
    let mean = [0.485f32, 0.456, 0.406];
    let std = [0.229f32, 0.224, 0.225];
    let mut data = Vec::with_capacity(3 * SIDE * SIDE * 4);
    for (m, s) in mean.iter().zip(std) {
        for y in 0..SIDE {
            for x in 0..SIDE {
                // Lines of text 18 px high every 40 px, with "words" of varying length and
                // "letters" 7 px wide with 3 px gaps.
                let line = y % 40;
                let word = (x / 60 + y / 40) % 5;
                let in_word = x % 60 < 35 + 5 * word;
                let letter = x % 10 < 7;
                let ink = (8..26).contains(&line) && in_word && letter && (40..600).contains(&x);
                let v = if ink { 20.0f32 } else { 245.0 };
                data.extend_from_slice(&((v / 255.0 - m) / s).to_le_bytes());
            }
        }
    }
    let mut header =
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 640, 640), }".to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
    npy.extend_from_slice(header.as_bytes());
    npy.extend_from_slice(&data);
    npy
}

/// `samples/page.npz`, shipped for the tour (what `numpy.savez_compressed("page.npz", x=...)`
/// writes: a deflated zip of `x.npy`; 4.9 MB of floats in 45 KB).
fn shipped_page() -> PathBuf {
    common::repo().join("samples/page.npz")
}

fn write_page(path: &Path) {
    let file = std::fs::File::create(path).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .last_modified_time(zip::DateTime::default());
    zip.start_file("x.npy", opts).unwrap();
    std::io::Write::write_all(&mut zip, &page_npy()).unwrap();
    zip.finish().unwrap();
}

/// The `x.npy` inside an `.npz`, if it has one.
fn npy_in(npz: &Path) -> Option<Vec<u8>> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(npz).ok()?).ok()?;
    let mut entry = zip.by_name("x.npy").ok()?;
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut entry, &mut out).ok()?;
    Some(out)
}

#[test]
fn the_shipped_page_is_the_one_this_test_makes() {
    let path = shipped_page();
    if std::env::var("ONNX_SAFEIFY_UPDATE_DOCS").as_deref() == Ok("1")
        && npy_in(&path).as_deref() != Some(&page_npy()[..])
    {
        write_page(&path);
        eprintln!("updated {}", path.display());
    }
    let shipped = npy_in(&path).unwrap_or_else(|| {
        panic!(
            "{} is missing or holds no x.npy (ONNX_SAFEIFY_UPDATE_DOCS=1 writes it)",
            path.display()
        )
    });
    assert!(
        shipped == page_npy(),
        "{} is not the page this test makes (ONNX_SAFEIFY_UPDATE_DOCS=1 writes it again)",
        path.display()
    );
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        size < 100_000,
        "the shipped page is {size} bytes: keep it small"
    );
}

/// The scratch folder of one page, with every file the pages' commands read.
fn scratch(corpus: Option<&Path>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(common::sample(), dir.path().join("ocr_tiny.onnx")).unwrap();
    for e in std::fs::read_dir(common::repo().join("docs/examples")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    if let Some(c) = corpus {
        for name in [
            "ch_PP-OCRv4_det_infer.onnx",
            "ch_ppocr_mobile_v2.0_cls_infer.onnx",
        ] {
            std::fs::copy(
                c.join("real").join(format!("rapidocr_onnxruntime__{name}")),
                dir.path().join(name),
            )
            .unwrap();
        }
    }
    // The tour's real input, as a user copies it from the checkout.
    std::fs::copy(shipped_page(), dir.path().join("page.npz")).unwrap();
    dir
}

fn run(cmd: &str, dir: &Path) -> Vec<String> {
    let bin_dir = common::bin().parent().unwrap().to_path_buf();
    let path = std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 2>&1; {cmd}"))
        .current_dir(dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .output()
        .expect("sh runs");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    // The cache folder appears in paths (the ONNX Runtime library); show it as users have it.
    text.lines().map(|l| l.trim_end().to_string()).collect()
}

fn needs_corpus(b: &Block) -> bool {
    b.steps
        .iter()
        .any(|(c, _)| c.contains("ch_PP-OCRv4") || c.contains("ch_ppocr"))
}

/// The other runtime a block runs on (`verify --runtime webgpu|openvino`), if any.
fn needs_other_runtime(b: &Block) -> Option<onnx_safeify::verify::RuntimeKind> {
    use onnx_safeify::verify::RuntimeKind;
    b.steps.iter().find_map(|(c, _)| {
        if c.contains("--runtime webgpu") {
            Some(RuntimeKind::Webgpu)
        } else if c.contains("--runtime openvino") {
            Some(RuntimeKind::Openvino)
        } else {
            None
        }
    })
}

/// Whether a block on `kind` can run. A runtime that is not installed fails the block, as the
/// runtime tests fail, unless ONNX_SAFEIFY_ALLOW_MISSING_RUNTIMES=1 (scripts/test.sh sets it
/// when scripts/setup-runtimes.sh could not install one): then the block is skipped, loudly.
fn other_runtime_ready(kind: onnx_safeify::verify::RuntimeKind, at: &str) -> bool {
    match onnx_safeify::runtime::run::external::check_available(&kind) {
        Ok(()) => true,
        Err(e) if std::env::var("ONNX_SAFEIFY_ALLOW_MISSING_RUNTIMES").as_deref() == Ok("1") => {
            // Straight to the process's stderr, which the test harness does not capture.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "!!!!!!!! SKIPPED: {at}: runtime {} is not installed: {e}",
                kind.name()
            );
            false
        }
        Err(_) => true,
    }
}

fn needs_runtime(b: &Block) -> bool {
    b.steps
        .iter()
        .any(|(c, _)| c.contains(" verify ") || c.contains("--verify"))
}

#[test]
fn command_outputs_in_the_docs_are_what_the_commands_print() {
    let update = std::env::var("ONNX_SAFEIFY_UPDATE_DOCS").as_deref() == Ok("1");
    let corpus = common::corpus();
    let runtime = onnx_safeify::runtime::run::discover::find_onnxruntime(
        &onnx_safeify::runtime::run::discover::Discovery::from_env(),
    )
    .is_ok();
    if !runtime && std::env::var("ONNX_SAFEIFY_ALLOW_MISSING_CORPUS").as_deref() != Ok("1") {
        panic!("ONNX Runtime not found: the `verify` transcripts need it (scripts/test.sh installs it, or set ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1 to skip them)");
    }
    let mut failures = Vec::new();
    let mut checked = 0;
    for page in PAGES {
        let path: PathBuf = common::repo().join(page);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let dir = scratch(corpus.as_deref());
        let found = blocks(&text);
        // Replacements are applied from the last block up, so earlier line numbers hold.
        let mut replace: Vec<(usize, usize, Vec<String>)> = Vec::new();
        for b in &found {
            if needs_corpus(b) && corpus.is_none() {
                eprintln!("SKIPPED: {page}:{}: needs the corpus", b.start + 1);
                continue;
            }
            if needs_runtime(b) && !runtime {
                eprintln!("SKIPPED: {page}:{}: needs ONNX Runtime", b.start + 1);
                continue;
            }
            if let Some(kind) = needs_other_runtime(b) {
                if !other_runtime_ready(kind, &format!("{page}:{}", b.start + 1)) {
                    continue;
                }
            }
            let mut fresh = Vec::new();
            let mut ok = true;
            for (cmd, shown) in &b.steps {
                let actual = run(cmd, dir.path());
                if !matches(shown, &actual) {
                    ok = false;
                    failures.push(format!(
                        "{page}:{}: `{cmd}` printed:\n{}\n--- the page shows:\n{}",
                        b.start + 1,
                        actual.join("\n"),
                        shown.join("\n")
                    ));
                }
                fresh.push(format!("$ {cmd}"));
                fresh.extend(actual);
            }
            checked += 1;
            if !ok {
                replace.push((b.start, b.end, fresh));
            }
        }
        if update && !replace.is_empty() {
            for (start, end, fresh) in replace.into_iter().rev() {
                lines.splice(start..end, fresh);
            }
            std::fs::write(&path, lines.join("\n") + "\n").unwrap();
            eprintln!("updated {page}");
        }
    }
    assert!(checked >= 10, "only {checked} transcripts found");
    if update {
        eprintln!("{} transcript(s) rewritten", failures.len());
        return;
    }
    assert!(
        failures.is_empty(),
        "{} transcript(s) in docs/ differ from what the commands print (scripts/docs.sh updates them):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// A span the prose quotes in backticks that stands for a piece of a command's output: a line's
/// label (`warning:`, `session:`), a figure (`0`, `7.540e-6`, `0/409600`) or a verdict word
/// (`PASS`, `MISMATCH`). Flags, file names, variables and identifiers are not quotes.
fn quotes_output(span: &str) -> bool {
    let s = span.trim();
    let label = s.len() > 1
        && s.ends_with(':')
        && s[..s.len() - 1]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == ' ' || c == '_' || c == '-');
    let figure = s.chars().any(|c| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_digit() || ".eE+-/%".contains(c))
        && s.starts_with(|c: char| c.is_ascii_digit() || c == '-');
    let verdict = ["PASS", "FAIL", "MISMATCH", "SKIPPED"].contains(&s);
    label || figure || verdict
}

/// The `##` sections of a page that show transcripts: for each, its heading, the spans its
/// prose quotes in backticks ([`quotes_output`]) and the output lines of its transcripts.
fn quoted_in_sections(text: &str) -> Vec<(String, Vec<String>, Vec<String>)> {
    let lines: Vec<&str> = text.lines().collect();
    let found = blocks(text);
    let mut out: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    let mut prose = String::new();
    let mut heading = String::from("(top)");
    let mut outputs: Vec<String> = Vec::new();
    let mut flush = |heading: &str, prose: &mut String, outputs: &mut Vec<String>| {
        let spans: Vec<String> = prose
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|s| quotes_output(s))
            .map(str::to_string)
            .collect();
        if !outputs.is_empty() {
            out.push((heading.to_string(), spans, std::mem::take(outputs)));
        }
        prose.clear();
    };
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.starts_with("```") {
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].starts_with("```"))
                .unwrap_or(lines.len());
            if let Some(b) = found.iter().find(|b| b.start == i + 1) {
                outputs.extend(b.steps.iter().flat_map(|(_, o)| o.iter().cloned()));
            }
            i = end + 1;
            continue;
        }
        if l.starts_with("## ") || l.starts_with("# ") {
            flush(&heading, &mut prose, &mut outputs);
            heading = l.to_string();
        } else {
            prose.push_str(l);
            prose.push(' ');
        }
        i += 1;
    }
    flush(&heading, &mut prose, &mut outputs);
    out
}

/// The prose around a transcript quotes its output: every label, figure and verdict a section's
/// prose shows in backticks appears in that section's transcripts, so a block regenerated by
/// `scripts/docs.sh` cannot leave the text describing lines or numbers it no longer has.
#[test]
fn figures_and_labels_the_prose_quotes_are_in_its_transcripts() {
    let mut missing = Vec::new();
    let mut quoted = 0;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(common::repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        for (heading, spans, outputs) in quoted_in_sections(&text) {
            for span in spans {
                quoted += 1;
                if !outputs.iter().any(|o| o.contains(span.trim())) {
                    missing.push(format!(
                        "{}: {heading}: the prose quotes `{span}`, which no transcript of the section shows",
                        page.display()
                    ));
                }
            }
        }
    }
    assert!(quoted >= 5, "only {quoted} quoted spans found");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_quote_rule_fails_on_stale_prose() {
    let page = "## 6. verify\n\nThe `warning:` line, `max_rel` reads `3`; `PASS` and `0`.\n\n```\n$ onnx-safeify verify a b\nPASS: 0 of 1\n```\n";
    let s = quoted_in_sections(page);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].1, vec!["warning:", "3", "PASS", "0"]);
    let absent: Vec<&String> = s[0]
        .1
        .iter()
        .filter(|q| !s[0].2.iter().any(|o| o.contains(q.as_str())))
        .collect();
    assert_eq!(absent, vec!["warning:", "3"]);
    for not_a_quote in ["--dim", "max_rel", "page.npz", "PATH", "x", "rx580", "e"] {
        assert!(!quotes_output(not_a_quote), "{not_a_quote}");
    }
}

#[test]
fn the_matcher_masks_and_elides() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert!(matches(&s(&["a", "[...]", "d"]), &s(&["a", "b", "c", "d"])));
    assert!(matches(&s(&["a", "[...]"]), &s(&["a"])));
    assert!(!matches(&s(&["a", "[...]", "d"]), &s(&["a", "b"])));
    assert!(!matches(&s(&["a", "b"]), &s(&["a", "c"])));
    assert!(matches(
        &s(&["wrote x.onnx in 3 ms"]),
        &s(&["wrote x.onnx in 48 ms"])
    ));
    assert!(matches(
        &s(&["runtime:   onnxruntime 1.32.0 (/a/libonnxruntime.so), CPU provider"]),
        &s(&["runtime:   onnxruntime 1.32.0 (/b/c/libonnxruntime.so.1), CPU provider"])
    ));
    assert!(matches(
        &s(&["reference: original on onnxruntime 1.32.0 (/a/lib.so), CPU provider"]),
        &s(&["reference: original on onnxruntime 1.32.0 (/b/lib.so.1), CPU provider"])
    ));
    assert!(matches(
        &s(&[r#"    "library": "/a/libonnxruntime.so","#]),
        &s(&[r#"    "library": "/b/libonnxruntime.so.1","#])
    ));
    assert!(!matches(
        &s(&["runtime:   onnxruntime 1.32.0 (/a/lib.so), CPU provider"]),
        &s(&["runtime:   onnxruntime 1.31.0 (/a/lib.so), CPU provider"])
    ));
    assert!(matches(&s(&["a [...] z"]), &s(&["a b c z"])));
    assert!(matches(&s(&["a [...] c [...] z"]), &s(&["a b c d z"])));
    assert!(!matches(&s(&["a [...] z"]), &s(&["a b c"])));
    assert!(!matches(&s(&["ab [...] bc"]), &s(&["abc"])));
    let page = "x\n```\n$ a\nout\n$ b\n```\n```sh\n$ not a transcript\n```\n";
    let b = blocks(page);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].steps.len(), 2);
    assert_eq!(b[0].steps[0].1, vec!["out".to_string()]);
}
