//! Element-wise comparison of an output against its reference.
//!
//! "Within tolerance" means, for every element, `|a - b| <= atol + rtol * |b|` where `b`
//! is the reference (the original model's output, or the expected output) and `a` the
//! rewritten model's. NaN equals NaN; infinities must match exactly. Complex values are
//! compared per real and imaginary part. Integer, bool and string outputs must be equal;
//! float8/float4 and packed sub-byte types must be bit-identical. A shape or dtype
//! mismatch fails without comparing values.
//!
//! Reported errors: `max_abs_err` is the largest `|a - b|`; `max_rel_err` the largest
//! `|a - b| / |b|` over elements with `b != 0` (elements with `b == 0` show in the absolute
//! error only). Both are `null` in JSON when infinite (a NaN or infinity mismatch).

use serde::Serialize;

use super::dtype::{DType, Kind};
use super::tensor::{HostTensor, TensorData};

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
        }
    }
}

/// Compares `actual` against `reference`.
pub fn compare(
    name: &str,
    reference: &HostTensor,
    actual: &HostTensor,
    tol: Tolerance,
) -> OutputComparison {
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
            Kind::Float => compare_floats(reference.dtype, b, a, tol),
            Kind::Int | Kind::Bool => compare_ints(reference.dtype, b, a),
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
    out.max_abs_err = stats.max_abs.and_then(finite_or_none);
    out.max_rel_err = stats.max_rel.and_then(finite_or_none);
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

fn compare_floats(dtype: DType, b: &[u8], a: &[u8], tol: Tolerance) -> Stats {
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
            (d > tol.atol + tol.rtol * y.abs(), d)
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
            let allowed = tol.atol + tol.rtol * y.abs();
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

fn compare_ints(dtype: DType, b: &[u8], a: &[u8]) -> Stats {
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

    #[test]
    fn multi_index_of_worst() {
        let tol = Tolerance::default();
        let b = f32s(vec![2, 3], &[0.0; 6]);
        let a = f32s(vec![2, 3], &[0.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
        assert_eq!(compare("y", &b, &a, tol).worst.unwrap().index, vec![1, 2]);
    }
}
