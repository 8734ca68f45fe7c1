//! How closely a rewrite reproduces the original on ONNX Runtime: its exactness class.
//!
//! Every rewrite declares one, next to its code (a decomposition in the `unfuse` registry, an
//! action's pass for the others):
//! - [`Exactness::Exact`]: the output is bit-identical on ONNX Runtime CPU (pins, cuts, splits
//!   that keep the arithmetic order, integer paths that mirror the kernel);
//! - [`Exactness::Rounding`]: within float rounding of the kernel's own arithmetic:
//!   [`ROUNDING_F32`] of the output's scale for float32 outputs, [`ROUNDING_F16_ULPS`] units in
//!   the last place at that scale for float16 and bfloat16 (the scale is the reference
//!   output's largest magnitude; for float32 never less than the smallest normal float32);
//! - [`Exactness::Approximate`]: anything else, with the bound the rewrite states (a fraction
//!   of the output's scale, or of a floor under it where the output has a natural range, as an
//!   LSTM's hidden state has (-1, 1)). Approximate rewrites run only when asked (`--allow-approximate`,
//!   `approximate: allow` in a rule file); otherwise the node falls back like any refusal
//!   (the built-in targets: to the CPU, which is exact).
//!
//! The loosest class of a compile is stored in the output's `metadata_props` under
//! [`EXACTNESS_KEY`] ([`Exactness::to_meta`]), so `verify` takes its default tolerance from it.

use std::fmt;

/// The largest difference a `rounding` rewrite may make to a float32 output, as a fraction of
/// the output's scale (its largest magnitude).
pub const ROUNDING_F32: f64 = 1e-5;
/// The largest difference a `rounding` rewrite may make to a float16 or bfloat16 output, in
/// units in the last place at the output's scale.
pub const ROUNDING_F16_ULPS: f64 = 2.0;
/// The model metadata key that holds the loosest class of the rewrites applied.
pub const EXACTNESS_KEY: &str = "onnx_safeify.exactness";

/// A rewrite's exactness class (ordered from tightest to loosest).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub enum Exactness {
    /// Bit-identical outputs on ONNX Runtime CPU.
    #[default]
    Exact,
    /// Within float rounding ([`ROUNDING_F32`], [`ROUNDING_F16_ULPS`]).
    Rounding,
    /// Within the stated fraction (the first field) of the output's scale, or of the floor
    /// (the second; 0 for none) where the scale is below it, and no closer promise.
    Approximate(f64, f64),
}

impl Exactness {
    /// The looser of two classes (two approximations: the larger bound).
    pub fn max(self, other: Exactness) -> Exactness {
        use Exactness::*;
        match (self, other) {
            (Approximate(a, fa), Approximate(b, fb)) => Approximate(a.max(b), fa.max(fb)),
            (Approximate(a, f), _) | (_, Approximate(a, f)) => Approximate(a, f),
            (Rounding, _) | (_, Rounding) => Rounding,
            _ => Exact,
        }
    }
    /// The class's name as reports, `explain` and rule files write it.
    pub fn name(self) -> &'static str {
        match self {
            Exactness::Exact => "exact",
            Exactness::Rounding => "rounding",
            Exactness::Approximate(..) => "approximate",
        }
    }
    pub fn is_approximate(self) -> bool {
        matches!(self, Exactness::Approximate(..))
    }
    /// The bound in words ("bit-identical", "<= 1e-5 of scale (f32), 2 ulp (f16)", ...).
    pub fn bound_text(self) -> String {
        match self {
            Exactness::Exact => "bit-identical".to_string(),
            Exactness::Rounding => format!(
                "<= {ROUNDING_F32:e} of the output's scale (float32), {ROUNDING_F16_ULPS} ulp at scale (float16/bfloat16)"
            ),
            Exactness::Approximate(b, f) if f > 0.0 => {
                format!("<= {b:e} of the output's scale, at least {f:e}")
            }
            Exactness::Approximate(b, _) => format!("<= {b:e} of the output's scale"),
        }
    }
    /// The form stored under [`EXACTNESS_KEY`]: `exact`, `rounding`, `approximate:<bound>` or
    /// `approximate:<bound>@<floor>`.
    pub fn to_meta(self) -> String {
        match self {
            Exactness::Approximate(b, f) if f > 0.0 => format!("approximate:{b:e}@{f:e}"),
            Exactness::Approximate(b, _) => format!("approximate:{b:e}"),
            other => other.name().to_string(),
        }
    }
    /// Parse the form [`Exactness::to_meta`] writes (None for anything else).
    pub fn from_meta(s: &str) -> Option<Exactness> {
        match s.trim() {
            "exact" => Some(Exactness::Exact),
            "rounding" => Some(Exactness::Rounding),
            other => {
                let rest = other.strip_prefix("approximate:")?.trim();
                let (b, f) = match rest.split_once('@') {
                    Some((b, f)) => (b.trim().parse().ok()?, f.trim().parse().ok()?),
                    None => (rest.parse().ok()?, 0.0),
                };
                let ok = |v: f64| v.is_finite() && v >= 0.0;
                (ok(b) && ok(f)).then_some(Exactness::Approximate(b, f))
            }
        }
    }
    /// The largest error this class allows on an output whose largest reference magnitude is
    /// `scale`, for an element type whose unit in the last place at `scale` is `ulp` (None for
    /// types compared exactly: integers, bool, strings). 0 for exact.
    pub fn allowed_error(
        self,
        scale: f64,
        ulp_at_scale: Option<f64>,
        is_f32_or_wider: bool,
    ) -> f64 {
        match self {
            Exactness::Exact => 0.0,
            Exactness::Rounding => {
                if is_f32_or_wider {
                    // Never below the smallest normal float32: under it a float32 result is
                    // subnormal (fewer bits, flushed to zero under FTZ/DAZ as on GPUs), so an
                    // output that is all subnormal has no 1e-5 of its scale to meet.
                    (ROUNDING_F32 * scale).max(f32::MIN_POSITIVE as f64)
                } else {
                    ROUNDING_F16_ULPS * ulp_at_scale.unwrap_or(0.0)
                }
            }
            Exactness::Approximate(b, floor) => {
                let r = Exactness::Rounding.allowed_error(scale, ulp_at_scale, is_f32_or_wider);
                (b * scale.max(floor)).max(r)
            }
        }
    }
}

impl fmt::Display for Exactness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exactness::Approximate(b, fl) if *fl > 0.0 => {
                write!(f, "approximate (<= {b:e} of scale, at least {fl:e})")
            }
            Exactness::Approximate(b, _) => write!(f, "approximate (<= {b:e} of scale)"),
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_order_and_round_trip_through_metadata() {
        use Exactness::*;
        assert_eq!(Exact.max(Rounding), Rounding);
        assert_eq!(Rounding.max(Exact), Rounding);
        assert_eq!(Rounding.max(Approximate(1e-3, 0.0)), Approximate(1e-3, 0.0));
        assert_eq!(
            Approximate(1e-2, 0.0).max(Approximate(1e-3, 1.0)),
            Approximate(1e-2, 1.0)
        );
        for e in [
            Exact,
            Rounding,
            Approximate(5e-3, 0.0),
            Approximate(1.0, 1.0),
        ] {
            assert_eq!(Exactness::from_meta(&e.to_meta()), Some(e));
        }
        assert_eq!(Approximate(1.0, 1.0).to_meta(), "approximate:1e0@1e0");
        assert_eq!(Exactness::from_meta("approximate:-1"), None);
        assert_eq!(Exactness::from_meta("approximate:1@-1"), None);
        assert_eq!(Exactness::from_meta("approximate:nan"), None);
        assert_eq!(Exactness::from_meta("close"), None);
    }

    #[test]
    fn allowed_errors_follow_the_class() {
        use Exactness::*;
        assert_eq!(Exact.allowed_error(10.0, None, true), 0.0);
        assert!((Rounding.allowed_error(10.0, None, true) - 1e-4).abs() < 1e-12);
        assert_eq!(
            Rounding.allowed_error(10.0, Some(0.0078125), false),
            0.015625
        );
        assert!((Approximate(1e-2, 0.0).allowed_error(10.0, None, true) - 0.1).abs() < 1e-12);
        // Under its floor the bound is a fraction of the floor, not of the scale.
        assert_eq!(Approximate(1.0, 1.0).allowed_error(1e-17, None, true), 1.0);
        assert_eq!(Approximate(1.0, 1.0).allowed_error(4.0, None, true), 4.0);
        // An all-subnormal float32 output: the floor is the smallest normal float32.
        assert_eq!(
            Rounding.allowed_error(1.2e-39, None, true),
            f32::MIN_POSITIVE as f64
        );
    }
}
