//! A fast hasher for maps whose keys a file cannot steer into collisions: small integer
//! indices the program assigns (value and node indices), and lookups into fixed tables the
//! program builds (the operator table). Maps keyed by names read from a file keep the standard
//! library's randomly keyed SipHash.
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
}
