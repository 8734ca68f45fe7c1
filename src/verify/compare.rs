//! Element-wise comparison of an output against its reference.
//!
//! An output is judged by one of two criteria ([`Criterion`]):
//! - the rewrite's exactness class ([`Exactness`], recorded by the compile in the rewritten
//!   model's `metadata_props`): `exact` means equal values (NaN equal to NaN at the same
//!   places; +0 equals -0); `rounding` allows 1e-5 of the output's scale for float32/float64
//!   outputs and 2 units in the last place at that scale for float16/bfloat16; `approximate:B`
//!   allows `B` times the scale (and at least the rounding bound), `approximate:B@F` `B` times
//!   the scale or `F`, whichever is larger. The scale is the reference
//!   output's largest finite magnitude;
//! - a tolerance ([`Tolerance`]): for every element, `|a - b| <= atol + rtol * |b|`, when it
//!   is given (`--atol`/`--rtol`) or when no class is recorded.
//!
//! Either way `b` is the reference (the original model's output, or the expected output) and
//! `a` the rewritten model's. NaN equals NaN; infinities must match exactly. Complex values
//! are compared per real and imaginary part. Integer, bool and string outputs must be equal
//! (up to a runtime's own difference, see [`Judge::allowance`]); float8/float4 and packed
//! sub-byte types must be bit-identical. A shape or dtype mismatch fails without comparing
//! values.
//!
//! Reported errors: `max_abs_err` is the largest `|a - b|`; `max_rel_err` the largest
//! `|a - b| / |b|` over elements with `b != 0` (elements with `b == 0` show in the absolute
//! error only). Both are `null` in JSON when infinite (a NaN or infinity mismatch). `scale`
//! is the reference's largest finite magnitude, `err_of_scale` the largest error as a
//! fraction of it, `bound` the largest error allowed (class criterion) and `judged_by` what
//! set it.

use serde::Serialize;

use crate::rewrite::exactness::Exactness;
use crate::runtime::run::dtype::{DType, Kind};
use crate::runtime::run::tensor::{HostTensor, TensorData};

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            rtol: 1e-4,
            atol: 1e-5,
        }
    }
}

/// What an output is judged against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Criterion {
    /// `|a - b| <= atol + rtol * |b|` for every element.
    Tolerance(Tolerance),
    /// The bound of a rewrite's exactness class at the output's scale.
    Class(Exactness),
}

impl Criterion {
    /// What `judged_by` says for this criterion: `exact`, `rounding`, `approximate:B` or
    /// `tolerance`.
    pub fn label(self) -> String {
        match self {
            Criterion::Tolerance(_) => "tolerance".into(),
            Criterion::Class(c) => c.to_meta(),
        }
    }
}

/// How one comparison is judged: the criterion, and an absolute allowance on top of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judge {
    pub criterion: Criterion,
    /// The largest difference allowed whatever the criterion says, when larger: twice a
    /// runtime's own largest finite difference from ONNX Runtime CPU on this output (once for
    /// each side), when the rewrite is judged on that runtime against the original on it (0:
    /// none).
    pub allowance: f64,
    /// A tolerance no element's bound goes below (`|a-b| <= atol + rtol*|b|` always passes):
    /// on another runtime whose own difference from ONNX Runtime CPU could not be measured
    /// (the original does not run there), a class bound defined on ONNX Runtime CPU is held
    /// to at least the default tolerance.
    pub floor: Option<Tolerance>,
}

impl Judge {
    pub fn tolerance(t: Tolerance) -> Judge {
        Judge {
            criterion: Criterion::Tolerance(t),
            allowance: 0.0,
            floor: None,
        }
    }

    pub fn class(c: Exactness) -> Judge {
        Judge {
            criterion: Criterion::Class(c),
            allowance: 0.0,
            floor: None,
        }
    }

    /// With a tolerance floor (only meaningful for a class criterion).
    pub fn with_floor(self, floor: Tolerance) -> Judge {
        Judge {
            floor: match self.criterion {
                Criterion::Class(_) => Some(floor),
                Criterion::Tolerance(_) => None,
            },
            ..self
        }
    }

    pub fn with_allowance(self, allowance: f64) -> Judge {
        Judge {
            allowance: if allowance.is_finite() && allowance > 0.0 {
                allowance
            } else {
                0.0
            },
            ..self
        }
    }
}

/// One unit in the last place of `dtype` at magnitude `scale` (None for types that are not
/// binary floats of a known width).
pub fn ulp_at(dtype: DType, scale: f64) -> Option<f64> {
    // (explicit mantissa bits, smallest normal exponent)
    let (mant, min_exp) = match dtype {
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        DType::F32 | DType::C64 => (23, -126),
        DType::F64 | DType::C128 => (52, -1022),
        _ => return None,
    };
    let e = if scale.is_finite() && scale > 0.0 {
        // The binary exponent of `scale`, read from its bits (exact, unlike log2).
        let bits = scale.to_bits();
        let biased = ((bits >> 52) & 0x7ff) as i32;
        if biased == 0 {
            min_exp
        } else {
            (biased - 1023).max(min_exp)
        }
    } else {
        min_exp
    };
    Some(2f64.powi(e - mant))
}

/// Whether the class bounds of `dtype` are those of float32 (1e-5 of scale) rather than
/// float16/bfloat16 (ulps at scale).
fn is_f32_or_wider(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64 | DType::C64 | DType::C128)
}

/// The largest finite magnitude of a numeric tensor (None for strings and opaque types).
pub fn scale_of(t: &HostTensor) -> Option<f64> {
    let TensorData::Bytes(b) = &t.data else {
        return None;
    };
    match t.dtype.kind() {
        Kind::Float => {
            let n = b.len() / t.dtype.scalar_size().unwrap_or(1) * t.dtype.lanes();
            let mut m = 0.0f64;
            for i in 0..n {
                let v = t.dtype.read_f64(b, i).abs();
                if v.is_finite() && v > m {
                    m = v;
                }
            }
            Some(m)
        }
        Kind::Int | Kind::Bool => {
            let n = b.len() / t.dtype.scalar_size().unwrap_or(1);
            let mut m = 0.0f64;
            for i in 0..n {
                m = m.max(t.dtype.read_i128(b, i).unsigned_abs() as f64);
            }
            Some(m)
        }
        _ => None,
    }
}

/// The largest finite `|a - b|` between two numeric tensors of the same dtype and shape
/// (elements where either side is NaN or infinite left out); None when they cannot be
/// compared element by element.
pub fn finite_max_abs_diff(b: &HostTensor, a: &HostTensor) -> Option<f64> {
    if a.dtype != b.dtype || a.shape != b.shape {
        return None;
    }
    let (TensorData::Bytes(bb), TensorData::Bytes(ab)) = (&b.data, &a.data) else {
        return None;
    };
    match b.dtype.kind() {
        Kind::Float => {
            let n = bb.len() / b.dtype.scalar_size().unwrap_or(1) * b.dtype.lanes();
            let mut m = 0.0f64;
            for i in 0..n {
                let d = (b.dtype.read_f64(ab, i) - b.dtype.read_f64(bb, i)).abs();
                if d.is_finite() && d > m {
                    m = d;
                }
            }
            Some(m)
        }
        Kind::Int | Kind::Bool => {
            let n = bb.len() / b.dtype.scalar_size().unwrap_or(1);
            let mut m = 0.0f64;
            for i in 0..n {
                let d = (b.dtype.read_i128(ab, i) - b.dtype.read_i128(bb, i)).unsigned_abs();
                m = m.max(d as f64);
            }
            Some(m)
        }
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// Some elements are out of tolerance.
    Mismatch,
    ShapeMismatch,
    DtypeMismatch,
    /// The output is not produced by the model under test.
    Missing,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Mismatch => "MISMATCH",
            Status::ShapeMismatch => "SHAPE MISMATCH",
            Status::DtypeMismatch => "DTYPE MISMATCH",
            Status::Missing => "MISSING",
        }
    }
}

/// The element where the error is worst relative to what the tolerance allows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Worst {
    pub index: Vec<usize>,
    pub expected: String,
    pub actual: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputComparison {
    pub name: String,
    pub status: Status,
    /// Reference dtype and shape.
    pub dtype: String,
    pub shape: Vec<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual_dtype: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual_shape: Option<Vec<usize>>,
    pub elements: usize,
    pub mismatched: usize,
    pub max_abs_err: Option<f64>,
    pub max_rel_err: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worst: Option<Worst>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The reference's largest finite magnitude (numeric outputs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// `max_abs_err / scale` (absent when either is unknown or infinite, or the scale is 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub err_of_scale: Option<f64>,
    /// The largest error allowed (class criterion; a tolerance's bound depends on each |b|).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound: Option<f64>,
    /// `bound / scale`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_of_scale: Option<f64>,
    /// What the output was judged by: `exact`, `rounding`, `approximate:B` (the rewrite's
    /// class) or `tolerance` (atol/rtol).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub judged_by: String,
    /// A runtime's own largest difference from ONNX Runtime CPU on this output, allowed on
    /// top of the criterion (verify on another runtime, original run there too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_allowance: Option<f64>,
    /// A tolerance no element's bound went below (see [`Judge::floor`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerance_floor: Option<Tolerance>,
    /// A float64 evaluation of the original, made where elements were past the bound (see
    /// [`explain_by_float64`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub float64: Option<Float64Check>,
}

/// How far the original and the rewrite each are from a float64 evaluation of the original
/// (`verify/wide.rs`), as fractions of the output's scale.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Float64Check {
    pub original_err_of_scale: f64,
    pub rewritten_err_of_scale: f64,
    /// The original is itself past the bound from float64 (an ill-conditioned output: every
    /// float32 evaluation rounds it that much), and the rewrite is within twice the original's
    /// own error of it. Such an output passes, and so does one where the rewrite is closer to
    /// float64 than the original.
    pub ill_conditioned: bool,
    /// Ops of the original the float64 evaluation ran in float32 (no float64 kernel).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub in_float32: Vec<String>,
}

impl OutputComparison {
    pub fn passed(&self) -> bool {
        self.status == Status::Ok
    }

    /// A comparison for an output the model under test does not produce.
    pub fn missing(name: &str, reference: &HostTensor, detail: String) -> OutputComparison {
        OutputComparison {
            name: name.to_string(),
            status: Status::Missing,
            dtype: reference.dtype.name().to_string(),
            shape: reference.shape.clone(),
            actual_dtype: None,
            actual_shape: None,
            elements: reference.len(),
            mismatched: reference.len(),
            max_abs_err: None,
            max_rel_err: None,
            worst: None,
            detail: Some(detail),
            scale: None,
            err_of_scale: None,
            bound: None,
            bound_of_scale: None,
            judged_by: String::new(),
            runtime_allowance: None,
            tolerance_floor: None,
            float64: None,
        }
    }
}

/// Judges a float32 output past its class bound once more against `wide`, a float64 evaluation
/// of the original (its values rounded to float32 once): when the original is itself past the
/// bound from it (an ill-conditioned output) and the rewrite within twice the original's own
/// error, or the rewrite is closer to it than the original, the elements are explained and the
/// output passes, saying so. Either way the two distances are recorded. Returns whether the
/// output now passes. An error of the rewrite smaller than the original's own error from
/// float64 cannot be told from rounding here (a 1e-3 change to one gamma of a Whisper block's
/// first layer norm stays below its second's 1.25e-4 of rounding).
///
/// Twice: the rewrite's float32 evaluation and the kernel's each round the ill-conditioned step
/// (a layer norm's mean, where the mean is ~1000 times the deviation) once, by comparable
/// amounts in different directions; a rewrite that computes another function is off float64 by
/// that function's difference, which the original is not.
pub fn explain_by_float64(
    c: &mut OutputComparison,
    reference: &HostTensor,
    actual: &HostTensor,
    wide: &HostTensor,
    in_float32: &[String],
) -> bool {
    if c.status != Status::Mismatch
        || reference.dtype != DType::F32
        || c.max_abs_err.is_none()
        || wide.dtype != reference.dtype
        || wide.shape != reference.shape
    {
        return c.passed();
    }
    let (Some(bound), Some(scale)) = (c.bound, c.scale.filter(|s| *s > 0.0)) else {
        return false;
    };
    let (Some(e_o), Some(e_r)) = (
        finite_max_abs_diff(wide, reference),
        finite_max_abs_diff(wide, actual),
    ) else {
        return false;
    };
    let ill_conditioned = e_o > bound && e_r <= 2.0 * e_o;
    // Closer to float64 than the original kernel itself: not less faithful than the original
    // (an inverse deviation from Welford's update on a row near 4e3 is 1e-5 of its scale off
    // float64, the decomposition's 2e-6; fuzz case TransformerChain_d706f8c030ef).
    let closer = e_r <= e_o;
    let mut ops: Vec<String> = in_float32.to_vec();
    ops.sort();
    ops.dedup();
    c.float64 = Some(Float64Check {
        original_err_of_scale: e_o / scale,
        rewritten_err_of_scale: e_r / scale,
        ill_conditioned,
        in_float32: ops.clone(),
    });
    let islands = if ops.is_empty() {
        String::new()
    } else {
        format!(" ({} in float32: no float64 kernel)", ops.join(", "))
    };
    let note = if ill_conditioned {
        c.status = Status::Ok;
        format!(
            "ill-conditioned: past the bound, but the original itself is {:.2e} of scale off a float64 evaluation{islands}, the rewrite {:.2e}, within twice that",
            e_o / scale,
            e_r / scale
        )
    } else if closer {
        c.status = Status::Ok;
        format!(
            "past the bound, but closer to a float64 evaluation of the original{islands} than the original is: the rewrite {:.2e} of scale off it, the original {:.2e}",
            e_r / scale,
            e_o / scale
        )
    } else {
        format!(
            "against a float64 evaluation of the original{islands}: the original is {:.2e} of scale off it, the rewrite {:.2e}",
            e_o / scale,
            e_r / scale
        )
    };
    c.detail = Some(match c.detail.take() {
        Some(d) => format!("{d}; {note}"),
        None => note,
    });
    c.passed()
}

/// Compares `actual` against `reference` within a tolerance.
pub fn compare(
    name: &str,
    reference: &HostTensor,
    actual: &HostTensor,
    tol: Tolerance,
) -> OutputComparison {
    compare_with(name, reference, actual, Judge::tolerance(tol))
}

/// Compares `actual` against `reference` as `judge` says.
pub fn compare_with(
    name: &str,
    reference: &HostTensor,
    actual: &HostTensor,
    judge: Judge,
) -> OutputComparison {
    compare_with_second(name, reference, actual, judge, None)
}

/// [`compare_with`], where an element off `reference` still passes when it is within the
/// same bound of `second` (same dtype and shape; ignored otherwise). Errors are measured
/// against `reference`; `detail` counts the elements `second` let pass. Used on another
/// runtime: the rewrite there is judged against the original there, and an element that
/// agrees with the original on ONNX Runtime CPU instead (a rewrite that keeps the runtime's
/// own difference away) is faithful too.
pub fn compare_with_second(
    name: &str,
    reference: &HostTensor,
    actual: &HostTensor,
    judge: Judge,
    second: Option<&HostTensor>,
) -> OutputComparison {
    let second = second
        .filter(|t| t.dtype == reference.dtype && t.shape == reference.shape)
        .and_then(|t| match &t.data {
            TensorData::Bytes(b) => Some(b.as_slice()),
            TensorData::Strings(_) => None,
        });
    let scale = scale_of(reference);
    let allowance = (judge.allowance > 0.0).then_some(judge.allowance);
    let bound = match judge.criterion {
        Criterion::Tolerance(_) => None,
        Criterion::Class(c) => Some(match reference.dtype.kind() {
            Kind::Float => {
                let s = scale.unwrap_or(0.0);
                c.allowed_error(
                    s,
                    ulp_at(reference.dtype, s),
                    is_f32_or_wider(reference.dtype),
                )
            }
            _ => 0.0,
        }),
    }
    .map(|b| b.max(judge.allowance));
    let mut out = OutputComparison {
        name: name.to_string(),
        status: Status::Ok,
        dtype: reference.dtype.name().to_string(),
        shape: reference.shape.clone(),
        actual_dtype: None,
        actual_shape: None,
        elements: reference.len(),
        mismatched: 0,
        max_abs_err: None,
        max_rel_err: None,
        worst: None,
        detail: None,
        scale,
        err_of_scale: None,
        bound,
        bound_of_scale: match (bound, scale) {
            (Some(b), Some(s)) if s > 0.0 => Some(b / s),
            _ => None,
        },
        judged_by: judge.criterion.label(),
        runtime_allowance: allowance,
        tolerance_floor: judge.floor,
        float64: None,
    };
    if reference.dtype != actual.dtype {
        out.status = Status::DtypeMismatch;
        out.actual_dtype = Some(actual.dtype.name().to_string());
        out.mismatched = out.elements;
        out.detail = Some(format!(
            "expected {}, got {}",
            reference.dtype.name(),
            actual.dtype.name()
        ));
        return out;
    }
    if reference.shape != actual.shape {
        out.status = Status::ShapeMismatch;
        out.actual_shape = Some(actual.shape.clone());
        out.mismatched = out.elements;
        out.detail = Some(format!(
            "expected shape {:?}, got {:?}",
            reference.shape, actual.shape
        ));
        return out;
    }
    let stats = match (&reference.data, &actual.data) {
        (TensorData::Bytes(b), TensorData::Bytes(a)) => match reference.dtype.kind() {
            Kind::Float => compare_floats(reference.dtype, b, a, second, judge, bound),
            Kind::Int | Kind::Bool => compare_ints(reference.dtype, b, a, second, judge.allowance),
            _ => compare_opaque(reference.dtype, b, a),
        },
        (TensorData::Strings(b), TensorData::Strings(a)) => compare_strings(b, a),
        _ => {
            out.status = Status::DtypeMismatch;
            out.detail = Some("string and non-string data".into());
            return out;
        }
    };
    out.mismatched = stats.mismatched;
    if stats.second > 0 {
        out.detail = Some(format!(
            "{} value(s) off this reference agree with the original on ONNX Runtime CPU",
            stats.second
        ));
    }
    out.max_abs_err = stats.max_abs.and_then(finite_or_none);
    out.max_rel_err = stats.max_rel.and_then(finite_or_none);
    out.err_of_scale = match (out.max_abs_err, scale) {
        (Some(e), Some(s)) if s > 0.0 => Some(e / s),
        (Some(0.0), Some(_)) => Some(0.0),
        _ => None,
    };
    if stats.mismatched > 0 {
        out.status = Status::Mismatch;
        if let Some((flat, expected, actual)) = stats.worst {
            out.worst = Some(Worst {
                index: unravel(flat, &reference.shape),
                expected,
                actual,
            });
        }
        if stats.nonfinite > 0 {
            out.detail = Some(format!(
                "{} element(s) differ in NaN or infinity",
                stats.nonfinite
            ));
        }
    }
    out
}

/// Says why comparing against `reference` proves little: a float output that is constant,
/// or whose magnitude never exceeds ten times `atol` (then any value that small passes).
pub fn weak_reference(reference: &HostTensor, tol: Tolerance) -> Option<String> {
    let TensorData::Bytes(b) = &reference.data else {
        return None;
    };
    if reference.dtype.kind() != Kind::Float || reference.len() < 2 {
        return None;
    }
    let n = reference.len() * reference.dtype.lanes();
    let (mut lo, mut hi, mut max_mag) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for i in 0..n {
        let v = reference.dtype.read_f64(b, i);
        if v.is_finite() {
            lo = lo.min(v);
            hi = hi.max(v);
            max_mag = max_mag.max(v.abs());
        }
    }
    if lo > hi {
        return Some("has no finite values".into());
    }
    if lo == hi {
        return Some(format!("is constant ({lo:e})"));
    }
    if max_mag <= 10.0 * tol.atol {
        return Some(format!(
            "never exceeds {max_mag:.3e} in magnitude (under 10 x atol)"
        ));
    }
    None
}

fn finite_or_none(v: f64) -> Option<f64> {
    if v.is_finite() {
        Some(v)
    } else {
        None
    }
}

#[derive(Default)]
struct Stats {
    mismatched: usize,
    /// Values off the reference that the second reference let pass.
    second: usize,
    nonfinite: usize,
    max_abs: Option<f64>,
    max_rel: Option<f64>,
    /// flat element index, expected, actual
    worst: Option<(usize, String, String)>,
}

fn bump(slot: &mut Option<f64>, v: f64) {
    *slot = Some(match *slot {
        Some(m) if m >= v => m,
        _ => v,
    });
}

/// `bound`: the class criterion's largest error (allowance included); with a tolerance the
/// bound of each element is `max(atol + rtol*|b|, allowance)`; a floor raises either.
fn compare_floats(
    dtype: DType,
    b: &[u8],
    a: &[u8],
    second: Option<&[u8]>,
    judge: Judge,
    bound: Option<f64>,
) -> Stats {
    let allowed_at = |y: f64| {
        let base = match (judge.criterion, bound) {
            (Criterion::Tolerance(t), _) => t.atol + t.rtol * y.abs(),
            (Criterion::Class(_), Some(b)) => b,
            (Criterion::Class(_), None) => 0.0,
        };
        let floor = judge.floor.map_or(0.0, |t| t.atol + t.rtol * y.abs());
        base.max(floor).max(judge.allowance)
    };
    let lanes = dtype.lanes();
    let scalars = b.len() / dtype.scalar_size().unwrap_or(1) * lanes;
    let mut s = Stats::default();
    let mut worst_ratio = -1.0f64;
    let mut last_bad_element = usize::MAX;
    for i in 0..scalars {
        let (x, y) = (dtype.read_f64(a, i), dtype.read_f64(b, i));
        let element = i / lanes;
        let (bad, diff) = if x.is_nan() || y.is_nan() {
            (!(x.is_nan() && y.is_nan()), f64::INFINITY)
        } else if x.is_infinite() || y.is_infinite() {
            (x != y, f64::INFINITY)
        } else {
            let d = (x - y).abs();
            bump(&mut s.max_abs, d);
            if y != 0.0 {
                bump(&mut s.max_rel, d / y.abs());
            }
            (d > allowed_at(y), d)
        };
        let bad = bad
            && match second {
                None => true,
                Some(c) => {
                    let z = dtype.read_f64(c, i);
                    let off = if x.is_nan() || z.is_nan() {
                        !(x.is_nan() && z.is_nan())
                    } else if x.is_infinite() || z.is_infinite() {
                        x != z
                    } else {
                        (x - z).abs() > allowed_at(z)
                    };
                    if !off {
                        s.second += 1;
                    }
                    off
                }
            };
        if bad {
            if last_bad_element != element {
                s.mismatched += 1;
                last_bad_element = element;
            }
            if !diff.is_finite() {
                s.nonfinite += 1;
                bump(&mut s.max_abs, f64::INFINITY);
            }
            let allowed = allowed_at(y);
            let ratio = if allowed > 0.0 {
                diff / allowed
            } else {
                f64::INFINITY
            };
            if ratio > worst_ratio || s.worst.is_none() {
                worst_ratio = ratio;
                s.worst = Some((element, format!("{y:e}"), format!("{x:e}")));
            }
        }
    }
    if s.max_abs.is_none() {
        s.max_abs = Some(0.0);
    }
    if s.max_rel.is_none() {
        s.max_rel = Some(0.0);
    }
    s
}

/// Integers must be equal, or differ by at most `allowance` (a runtime's own difference)
/// from `b` or from `second`.
fn compare_ints(dtype: DType, b: &[u8], a: &[u8], second: Option<&[u8]>, allowance: f64) -> Stats {
    let n = b.len() / dtype.scalar_size().unwrap_or(1);
    let mut s = Stats {
        max_abs: Some(0.0),
        max_rel: Some(0.0),
        ..Stats::default()
    };
    let mut worst = 0i128;
    for i in 0..n {
        let (x, y) = (dtype.read_i128(a, i), dtype.read_i128(b, i));
        if x != y {
            let d = (x - y).abs();
            let by_second =
                second.is_some_and(|c| ((x - dtype.read_i128(c, i)).abs() as f64) <= allowance);
            if (d as f64) <= allowance || by_second {
                bump(&mut s.max_abs, d as f64);
                if y != 0 {
                    bump(&mut s.max_rel, d as f64 / (y.abs() as f64));
                }
                if by_second && (d as f64) > allowance {
                    s.second += 1;
                }
                continue;
            }
            s.mismatched += 1;
            bump(&mut s.max_abs, d as f64);
            if y != 0 {
                bump(&mut s.max_rel, d as f64 / (y.abs() as f64));
            }
            if d > worst {
                worst = d;
                s.worst = Some((i, y.to_string(), x.to_string()));
            }
        }
    }
    s
}

fn compare_opaque(dtype: DType, b: &[u8], a: &[u8]) -> Stats {
    let unit = dtype.scalar_size().unwrap_or(1);
    let mut s = Stats::default();
    for (i, (cb, ca)) in b.chunks(unit).zip(a.chunks(unit)).enumerate() {
        if cb != ca {
            s.mismatched += 1;
            if s.worst.is_none() {
                s.worst = Some((i, format!("{cb:02x?}"), format!("{ca:02x?}")));
            }
        }
    }
    s
}

fn compare_strings(b: &[String], a: &[String]) -> Stats {
    let mut s = Stats::default();
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if x != y {
            s.mismatched += 1;
            if s.worst.is_none() {
                s.worst = Some((i, format!("{y:?}"), format!("{x:?}")));
            }
        }
    }
    s
}

/// Flat row-major index to a multi-dimensional index.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for k in (0..shape.len()).rev() {
        let d = shape[k].max(1);
        idx[k] = flat % d;
        flat /= d;
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(shape: Vec<usize>, v: &[f32]) -> HostTensor {
        HostTensor::new(
            DType::F32,
            shape,
            TensorData::Bytes(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        )
        .unwrap()
    }

    fn i64s(v: &[i64]) -> HostTensor {
        HostTensor::new(
            DType::I64,
            vec![v.len()],
            TensorData::Bytes(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        )
        .unwrap()
    }

    #[test]
    fn tolerance_rule() {
        let tol = Tolerance {
            rtol: 1e-3,
            atol: 1e-5,
        };
        let b = f32s(vec![3], &[1.0, 0.0, 100.0]);
        let ok = f32s(vec![3], &[1.0009, 0.000009, 100.09]);
        let c = compare("y", &b, &ok, tol);
        assert!(c.passed(), "{c:?}");
        assert!(c.max_abs_err.unwrap() > 0.08);
        let bad = f32s(vec![3], &[1.0, 0.00002, 100.0]);
        let c = compare("y", &b, &bad, tol);
        assert_eq!(c.status, Status::Mismatch);
        assert_eq!(c.mismatched, 1);
        assert_eq!(c.worst.as_ref().unwrap().index, vec![1]);
    }

    #[test]
    fn nan_equals_nan_but_not_a_number() {
        let tol = Tolerance::default();
        let b = f32s(vec![2], &[f32::NAN, 1.0]);
        assert!(compare("y", &b, &f32s(vec![2], &[f32::NAN, 1.0]), tol).passed());
        let c = compare("y", &b, &f32s(vec![2], &[0.0, 1.0]), tol);
        assert_eq!(c.status, Status::Mismatch);
        assert_eq!(c.max_abs_err, None);
        let inf = f32s(vec![1], &[f32::INFINITY]);
        assert!(compare("y", &inf, &inf, tol).passed());
        assert!(!compare("y", &inf, &f32s(vec![1], &[f32::NEG_INFINITY]), tol).passed());
    }

    #[test]
    fn integers_must_be_equal() {
        let tol = Tolerance {
            rtol: 1.0,
            atol: 10.0,
        };
        assert!(compare("i", &i64s(&[1, 2]), &i64s(&[1, 2]), tol).passed());
        let c = compare("i", &i64s(&[1, 2]), &i64s(&[1, 3]), tol);
        assert_eq!(c.status, Status::Mismatch);
        assert_eq!(c.max_abs_err, Some(1.0));
    }

    #[test]
    fn shape_and_dtype_mismatch() {
        let tol = Tolerance::default();
        let a = f32s(vec![2], &[1.0, 2.0]);
        let b = f32s(vec![1, 2], &[1.0, 2.0]);
        assert_eq!(compare("y", &a, &b, tol).status, Status::ShapeMismatch);
        let c = i64s(&[1, 2]);
        assert_eq!(compare("y", &a, &c, tol).status, Status::DtypeMismatch);
    }

    fn f16_bits(v: &[u16]) -> HostTensor {
        HostTensor::new(
            DType::F16,
            vec![v.len()],
            TensorData::Bytes(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        )
        .unwrap()
    }

    #[test]
    fn ulps_at_scale() {
        assert_eq!(ulp_at(DType::F16, 1.0), Some(2f64.powi(-10)));
        assert_eq!(ulp_at(DType::F16, 1.999), Some(2f64.powi(-10)));
        assert_eq!(ulp_at(DType::F16, 2.0), Some(2f64.powi(-9)));
        assert_eq!(ulp_at(DType::F16, 0.0), Some(2f64.powi(-24)));
        assert_eq!(ulp_at(DType::F16, 1e-6), Some(2f64.powi(-24)));
        assert_eq!(ulp_at(DType::BF16, 3.0), Some(2f64.powi(-6)));
        assert_eq!(ulp_at(DType::F32, 1.0), Some(2f64.powi(-23)));
        assert_eq!(ulp_at(DType::I32, 1.0), None);
    }

    #[test]
    fn classes_judge_against_the_scale() {
        let b = f32s(vec![3], &[10.0, -2.0, 0.5]);
        // One float32 rounding step at 0.5: fails exact, passes rounding (1e-4 at scale 10).
        let step = f32s(vec![3], &[10.0, -2.0, f32::from_bits(0.5f32.to_bits() + 1)]);
        let c = compare_with("y", &b, &step, Judge::class(Exactness::Exact));
        assert_eq!(c.status, Status::Mismatch);
        assert_eq!(c.bound, Some(0.0));
        assert_eq!(c.judged_by, "exact");
        let c = compare_with("y", &b, &step, Judge::class(Exactness::Rounding));
        assert!(c.passed(), "{c:?}");
        assert_eq!(c.scale, Some(10.0));
        assert!((c.bound.unwrap() - 1e-4).abs() < 1e-12);
        assert!((c.bound_of_scale.unwrap() - 1e-5).abs() < 1e-15);
        assert!(c.err_of_scale.unwrap() > 0.0 && c.err_of_scale.unwrap() < 1e-7);
        // Equal values (+0 against -0, NaN against NaN) are exact.
        let z = f32s(vec![2], &[0.0, f32::NAN]);
        let nz = f32s(vec![2], &[-0.0, f32::NAN]);
        assert!(compare_with("z", &z, &nz, Judge::class(Exactness::Exact)).passed());
        // Approximate: B x scale; the allowance raises the bound.
        let off = f32s(vec![3], &[10.0, -2.0, 0.5 + 0.05]);
        let c = compare_with(
            "y",
            &b,
            &off,
            Judge::class(Exactness::Approximate(1e-2, 0.0)),
        );
        assert!(c.passed(), "{c:?}");
        let c = compare_with(
            "y",
            &b,
            &off,
            Judge::class(Exactness::Approximate(1e-3, 0.0)),
        );
        assert_eq!(c.status, Status::Mismatch);
        let c = compare_with(
            "y",
            &b,
            &off,
            Judge::class(Exactness::Approximate(1e-3, 0.0)).with_allowance(0.06),
        );
        assert!(c.passed(), "{c:?}");
        assert_eq!(c.runtime_allowance, Some(0.06));
        // float16: 2 ulp at the scale (scale 1.5: ulp 2^-10).
        // (1.5 is 0x3e00, 0.25 is 0x3400 where one step is 2^-12: 8 steps are 2 ulp at 1.5.)
        let h = f16_bits(&[0x3e00, 0x3400]);
        let two = f16_bits(&[0x3e00, 0x3408]);
        let three = f16_bits(&[0x3e00, 0x340c]);
        assert!(compare_with("h", &h, &two, Judge::class(Exactness::Rounding)).passed());
        assert!(!compare_with("h", &h, &three, Judge::class(Exactness::Rounding)).passed());
        // Integers stay exact under any class, unless the runtime's allowance covers it.
        let c = compare_with(
            "i",
            &i64s(&[1, 2]),
            &i64s(&[1, 3]),
            Judge::class(Exactness::Approximate(0.9, 0.0)),
        );
        assert_eq!(c.status, Status::Mismatch);
        let c = compare_with(
            "i",
            &i64s(&[1, 2]),
            &i64s(&[1, 3]),
            Judge::class(Exactness::Exact).with_allowance(1.0),
        );
        assert!(c.passed(), "{c:?}");
    }

    #[test]
    fn multi_index_of_worst() {
        let tol = Tolerance::default();
        let b = f32s(vec![2, 3], &[0.0; 6]);
        let a = f32s(vec![2, 3], &[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
        assert_eq!(compare("y", &b, &a, tol).worst.unwrap().index, vec![1, 2]);
    }
}
