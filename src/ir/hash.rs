//! A fast hasher for maps whose keys a file cannot steer into collisions: small integer
//! indices the program assigns (value and node indices), and lookups into fixed tables the
//! program builds (the operator table). Maps keyed by names read from a file are keyed by
//! [`crate::ir::name_hash`], a fixed hash, mixed again with random keys ([`PreHashedBuild`]), or
//! keep the standard library's randomly keyed SipHash.
//!
//! The hash is one multiply-rotate-xor step per word (the Fx hash of Firefox and rustc), with
//! a final mix that moves the high bits down (hashbrown picks buckets from the low bits).
//!
//! Why an index key is safe: indices are `0..n` for a file of `n` values. A hash table holding
//! `k` of them has at least `k` buckets, so at most about `n / k` indices of `0..n` fall in any
//! one bucket whatever the mix: `k` keys in one bucket need a file of `k²` values, and cost
//! `k²` probes, linear in the file's size.

use std::hash::{BuildHasherDefault, Hasher};

const K: u64 = 0xf135_7aea_2e62_a9c5;

/// See the module documentation.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(26) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let h = self.0;
        h ^ (h >> 29) ^ (h >> 47)
    }
}

/// Builds [`FastHasher`]s (for `HashMap::with_hasher` / `HashMap::default`).
pub type FastBuild = BuildHasherDefault<FastHasher>;
/// A hash map with [`FastHasher`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, FastBuild>;
/// A hash set with [`FastHasher`].
pub type FastSet<K> = std::collections::HashSet<K, FastBuild>;

/// Builds the hashers of maps keyed by a name's [`crate::ir::name_hash`]: the key is already a
/// hash of the name, but a fixed one (so fresh names are the same on every run), and a file
/// could choose names whose hashes share the low bits that pick a bucket. Each map draws
/// two keys at random (from the standard library's per-process keys) and its hash is folded
/// 128-bit multiplies of the key with them, which moves every bit of the key into every bit of the
/// result: a file that does not know the keys cannot steer keys into one bucket. Two
/// multiplies, where hashing the `u64` again with SipHash took about a hundred instructions.
#[derive(Clone, Copy)]
pub struct PreHashedBuild {
    k0: u64,
    k1: u64,
}

impl Default for PreHashedBuild {
    fn default() -> Self {
        use std::hash::BuildHasher;
        let s = std::collections::hash_map::RandomState::new();
        PreHashedBuild {
            k0: s.hash_one(0x243f_6a88_85a3_08d3_u64),
            k1: s.hash_one(0x1319_8a2e_0370_7344_u64) | 1,
        }
    }
}

impl std::hash::BuildHasher for PreHashedBuild {
    type Hasher = PreHasher;
    #[inline]
    fn build_hasher(&self) -> PreHasher {
        PreHasher {
            k0: self.k0,
            k1: self.k1,
            h: 0,
        }
    }
}

/// See [`PreHashedBuild`].
pub struct PreHasher {
    k0: u64,
    k1: u64,
    h: u64,
}

impl PreHasher {
    /// Two folded multiplies: after one, the low bits of the result still depend on the key's
    /// low bits more than on its high ones.
    #[inline]
    fn fold(&self, x: u64) -> u64 {
        let f = |a: u64, b: u64| {
            let m = u128::from(a) * u128::from(b);
            (m as u64) ^ ((m >> 64) as u64)
        };
        f(f(x ^ self.k0, self.k1) ^ self.k1, self.k0 | 1)
    }
}

impl Hasher for PreHasher {
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.h = self.fold(self.h ^ i);
    }
    /// Keys other than a `u64` (none in this program) are folded eight bytes at a time.
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.h = self
                .fold(self.h ^ u64::from_le_bytes(w))
                .rotate_left(c.len() as u32);
        }
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.h
    }
}

/// A set of name hashes (see [`PreHashedBuild`]).
pub type HashKeySet = std::collections::HashSet<u64, PreHashedBuild>;
/// A map keyed by name hashes (see [`PreHashedBuild`]).
pub type HashKeyMap<V> = std::collections::HashMap<u64, V, PreHashedBuild>;

/// A set of borrowed names, keyed by [`crate::ir::name_hash`] (one fast hash per name, where a
/// `HashSet<&str>` hashes with SipHash) and exact: a name whose hash is another's is kept
/// apart, by name, in a randomly keyed set.
pub struct NameSet<'a> {
    by_hash: HashKeyMap<&'a str>,
    clashes: std::collections::HashSet<&'a str>,
    hash: fn(&str) -> u64,
}

impl<'a> NameSet<'a> {
    pub fn with_capacity(n: usize) -> Self {
        Self::with_hash(n, crate::ir::name_hash)
    }
    fn with_hash(n: usize, hash: fn(&str) -> u64) -> Self {
        NameSet {
            by_hash: HashKeyMap::with_capacity_and_hasher(n, PreHashedBuild::default()),
            clashes: std::collections::HashSet::new(),
            hash,
        }
    }
    /// Add `name`; `false` when it was there already.
    pub fn insert(&mut self, name: &'a str) -> bool {
        use std::collections::hash_map::Entry;
        match self.by_hash.entry((self.hash)(name)) {
            Entry::Vacant(e) => {
                e.insert(name);
                true
            }
            Entry::Occupied(e) => *e.get() != name && self.clashes.insert(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_indices_and_strings() {
        use std::hash::{BuildHasher, Hash};
        let b = FastBuild::default();
        let h = |x: &dyn Fn(&mut FastHasher)| {
            let mut s = b.build_hasher();
            x(&mut s);
            s.finish()
        };
        // Consecutive indices land in different low bits.
        let low: std::collections::HashSet<u64> =
            (0..1024usize).map(|i| h(&|s| i.hash(s)) & 1023).collect();
        assert!(low.len() > 600, "{}", low.len());
        // Strings that differ only in length or in the last byte differ.
        assert_ne!(h(&|s| "ab".hash(s)), h(&|s| "ab\0".hash(s)));
        assert_ne!(h(&|s| ("", "Add").hash(s)), h(&|s| ("", "Adc").hash(s)));
        let m: FastMap<usize, usize> = (0..100).map(|i| (i, i * 2)).collect();
        assert_eq!(m[&42], 84);
    }

    #[test]
    fn name_hashes_that_share_low_bits_spread() {
        use std::hash::BuildHasher;
        let b = PreHashedBuild::default();
        // Keys a file could pick: 1,024 that differ in ten bits only, the low ones or high
        // ones, land in most of 1,024 buckets (about 647 for random keys).
        for shift in [0, 10, 20, 32, 44, 54] {
            let low: std::collections::HashSet<u64> = (0..1024u64)
                .map(|i| b.hash_one((i << shift) ^ 0x005a_5a00_000a_bcde) & 1023)
                .collect();
            assert!(low.len() > 600, "shift {shift}: {}", low.len());
        }
        // Two maps draw different keys.
        let c = PreHashedBuild::default();
        assert_ne!(b.hash_one(7u64), c.hash_one(7u64));
        let mut m: HashKeyMap<u32> = HashKeyMap::default();
        m.insert(u64::MAX, 1);
        m.insert(0, 2);
        assert_eq!((m[&u64::MAX], m[&0]), (1, 2));
    }

    /// Names are told apart by name, also when every name has one hash.
    #[test]
    fn name_sets_are_exact() {
        for mut set in [NameSet::with_capacity(4), NameSet::with_hash(4, |_| 7)] {
            let names = ["a", "b", "input.1", "input.18", ""];
            for n in names {
                assert!(set.insert(n), "{n}");
            }
            for n in names {
                assert!(!set.insert(n), "{n} twice");
            }
        }
    }
}
