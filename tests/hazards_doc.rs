//! `docs/hazards.md` is the evidence behind the built-in targets: every `evidence` string of
//! every rule and runtime setting must be the exact text of a level-3 heading there, and each
//! entry must say what it affects, the failure, the pattern and the rules resting on it (and
//! name every rule that cites it).

use std::collections::BTreeMap;
use std::path::Path;

use onnx_safeify::rules::{builtin_names, load_target};

const FIELDS: [&str; 4] = ["**Affects:**", "**Failure:**", "**Pattern:**", "**Rules:**"];

/// The entries of the page: heading text -> the entry's body (up to the next heading).
fn entries(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if line.starts_with('#') {
            if let Some((h, body)) = current.take() {
                assert!(
                    out.insert(h.clone(), body).is_none(),
                    "docs/hazards.md: two entries named {h}"
                );
            }
            if let Some(h) = line.strip_prefix("### ") {
                current = Some((h.trim().to_string(), String::new()));
            }
        } else if let Some((_, body)) = &mut current {
            body.push_str(line);
            body.push('\n');
        }
    }
    if let Some((h, body)) = current {
        out.insert(h, body);
    }
    out
}

fn page() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/hazards.md");
    let text = std::fs::read_to_string(&path).expect("docs/hazards.md is part of the repository");
    entries(&text)
}

#[test]
fn every_evidence_string_has_an_entry() {
    let page = page();
    let mut missing = Vec::new();
    let mut rule_not_named = Vec::new();
    let mut count = 0;
    for name in builtin_names() {
        let t = load_target(name).unwrap();
        for r in &t.rules {
            for e in &r.evidence {
                count += 1;
                match page.get(e.as_str()) {
                    None => missing.push(format!("{name} rule {}: {e}", r.id)),
                    Some(body) if !body.contains(&format!("`{}`", r.id)) => {
                        rule_not_named.push(format!("{e} does not name {name} rule `{}`", r.id))
                    }
                    Some(_) => {}
                }
            }
        }
        for s in &t.runtime {
            for e in &s.evidence {
                count += 1;
                if !page.contains_key(e.as_str()) {
                    missing.push(format!("{name} runtime setting {}: {e}", s.key));
                }
            }
        }
    }
    assert!(
        count > 50,
        "only {count} evidence strings: is the target list empty?"
    );
    assert!(
        missing.is_empty(),
        "evidence with no `### <evidence>` heading in docs/hazards.md:\n{}",
        missing.join("\n")
    );
    assert!(
        rule_not_named.is_empty(),
        "entries that do not name a rule resting on them:\n{}",
        rule_not_named.join("\n")
    );
}

#[test]
fn every_entry_has_its_four_fields() {
    let page = page();
    assert!(page.len() >= 40, "only {} entries", page.len());
    for (heading, body) in &page {
        for field in FIELDS {
            assert!(
                body.lines()
                    .any(|l| l.trim_start_matches("- ").starts_with(field)),
                "docs/hazards.md: entry {heading} has no {field} line"
            );
        }
    }
}

#[test]
fn the_resolver_is_exact() {
    // A heading matches only the whole evidence string: a prefix of an issue number, or the
    // number alone, does not resolve.
    let page = entries("### microsoft/onnxruntime#29263\n- **Affects:** x\n");
    assert!(page.contains_key("microsoft/onnxruntime#29263"));
    assert!(!page.contains_key("microsoft/onnxruntime#2926"));
    assert!(!page.contains_key("#29263"));
}
