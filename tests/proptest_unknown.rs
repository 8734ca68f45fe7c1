//! Property: models with fields the schema does not define, mutated at random, go through the
//! `unknown` fuzz target's harness (`fuzz/src/harness.rs`, `unknown_input`) without a panic: the
//! scan accepts what prost decodes and reports fields where they lie, an untouched model comes
//! back byte for byte, the writer's placement drops and invents nothing, an rx580 compile keeps
//! every field or refuses naming them. Seeds: `fuzz/corpus/unknown/`. Mutations: byte flips,
//! inserted and deleted runs, truncation, and unknown fields of every wire type appended to the
//! model or spliced into the graph (the graph's length is fixed up, so they stay well formed).
//!
//! Deterministic: a fixed seed (override with PROPTEST_RNG_SEED), 48 cases (PROPTEST_CASES;
//! a long run is a cheap stand-in for coverage-guided fuzzing where cargo-fuzz is missing).

#[path = "../fuzz/src/harness.rs"]
mod harness;

use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

fn config(default_cases: u32) -> Config {
    let mut c = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = default_cases;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = RngSeed::Fixed(0x0dd_f1e1d);
    }
    c
}

fn seeds() -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/unknown");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    v.sort();
    v.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One field numbered `n` of wire type `w` (a group holds one varint).
fn unknown_field(n: u32, w: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    let w = [0u8, 1, 2, 3, 5][w as usize % 5];
    varint(&mut f, (u64::from(n) << 3) | u64::from(w));
    match w {
        0 => varint(&mut f, payload.iter().map(|&b| u64::from(b)).sum()),
        1 => f.extend((payload.len() as u64).to_le_bytes()),
        2 => {
            varint(&mut f, payload.len() as u64);
            f.extend_from_slice(payload);
        }
        3 => {
            f.extend([0x08, 0x01]);
            varint(&mut f, (u64::from(n) << 3) | 4);
        }
        _ => f.extend((payload.len() as u32).to_le_bytes()),
    }
    f
}

/// Splice `field` at the start of the model's graph (field 7), fixing the graph's length.
fn into_graph(model: &[u8], field: &[u8]) -> Option<Vec<u8>> {
    let mut pos = 0;
    while pos < model.len() {
        let (key, kl) = read_varint(&model[pos..])?;
        let body = pos + kl;
        match key & 7 {
            0 => pos = body + read_varint(&model[body..])?.1,
            1 => pos = body + 8,
            5 => pos = body + 4,
            2 => {
                let (len, ll) = read_varint(&model[body..])?;
                let start = body + ll;
                let end = start.checked_add(len as usize)?;
                if end > model.len() {
                    return None;
                }
                if key >> 3 == 7 {
                    let mut out = model[..pos].to_vec();
                    varint(&mut out, key);
                    varint(&mut out, len + field.len() as u64);
                    out.extend_from_slice(field);
                    out.extend_from_slice(&model[start..]);
                    return Some(out);
                }
                pos = end;
            }
            _ => return None,
        }
    }
    None
}

fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &x) in b.iter().enumerate().take(10) {
        v |= u64::from(x & 0x7f) << (7 * i);
        if x < 0x80 {
            return Some((v, i + 1));
        }
    }
    None
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
    AppendUnknown(u32, u8, Vec<u8>),
    GraphUnknown(u32, u8, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let number = prop_oneof![17u32..40, 1000u32..1100, 536_870_000u32..536_870_911];
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(p, x)| Mutation::Flip(p, x)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..6))
            .prop_map(|(p, b)| Mutation::Insert(p, b)),
        (any::<usize>(), 1usize..8).prop_map(|(p, n)| Mutation::Delete(p, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        (
            number.clone(),
            any::<u8>(),
            prop::collection::vec(any::<u8>(), 0..12)
        )
            .prop_map(|(n, w, b)| Mutation::AppendUnknown(n, w, b)),
        (
            number,
            any::<u8>(),
            prop::collection::vec(any::<u8>(), 0..12)
        )
            .prop_map(|(n, w, b)| Mutation::GraphUnknown(n, w, b)),
    ]
}

fn apply(mut m: Vec<u8>, mu: &Mutation) -> Vec<u8> {
    let at = |p: usize, len: usize| if len == 0 { 0 } else { p % len };
    match mu {
        Mutation::Flip(p, x) => {
            if !m.is_empty() {
                let i = at(*p, m.len());
                m[i] ^= x;
            }
        }
        Mutation::Insert(p, b) => {
            let i = at(*p, m.len() + 1);
            m.splice(i..i, b.iter().copied());
        }
        Mutation::Delete(p, n) => {
            if !m.is_empty() {
                let i = at(*p, m.len());
                let e = (i + n).min(m.len());
                m.drain(i..e);
            }
        }
        Mutation::Truncate(p) => m.truncate(at(*p, m.len() + 1)),
        Mutation::AppendUnknown(n, w, b) => m.extend(unknown_field(*n, *w, b)),
        Mutation::GraphUnknown(n, w, b) => {
            if let Some(out) = into_graph(&m, &unknown_field(*n, *w, b)) {
                m = out;
            }
        }
    }
    m
}

proptest! {
    #![proptest_config(config(48))]
    #[test]
    fn mutated_models_with_unknown_fields_keep_the_promises(
        seed in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 0..4),
    ) {
        let all = seeds();
        let mut m = all[seed.index(all.len())].clone();
        for mu in &mutations {
            m = apply(m, mu);
        }
        // Panics are the failures; a clean refusal is fine.
        let _ = harness::unknown_input(&m);
    }
}

#[test]
fn every_seed_goes_all_the_way_through() {
    for (i, s) in seeds().iter().enumerate() {
        assert_eq!(harness::unknown_input(s), Ok(()), "seed {i}");
    }
}
