//! Elementwise operators: unary maps (activations, math), broadcasting binary and variadic
//! operators, comparisons, `Where`, `Cast`. Shapes follow ONNX Broadcasting.md
//! (multidirectional, right-aligned; before opset 7 the legacy `broadcast` attribute made
//! B follow A, so the output has A's shape). Small integer and float constants are folded.

use crate::tensor::dtype::{BOOL, DOUBLE, FLOAT};

use super::consts::{self, broadcast_index, fit_int, is_float_type, is_int_type, round_float};
use super::consts::{Elems, ValueData};
use super::ctx::{Ctx, Out};
use super::dims::broadcast_shapes;
use super::expr;
use super::{Dim, Shape};

/// Same element type and shape as input 0.
pub(crate) fn same(c: &Ctx) -> Vec<Out> {
    vec![Out::info(c.info(0).clone())]
}

/// `Identity` (and other pass-through ops): contents pass through too.
pub(crate) fn identity(c: &Ctx) -> Vec<Out> {
    match c.value_data(0) {
        Some(v) => vec![Out::from_data(v)],
        None => same(c),
    }
}

/// Same shape as input 0, element type bool (`IsNaN`, `IsInf`, `Not` is folded apart).
pub(crate) fn same_shape_bool(c: &Ctx) -> Vec<Out> {
    vec![Out::with_shape(Some(BOOL), c.info(0).shape.clone())]
}

/// An elementwise scalar function for folding.
type ScalarFn<'a> = &'a dyn Fn(&[S]) -> Option<S>;

/// A scalar argument of folding.
#[derive(Debug, Clone)]
enum S {
    I(Dim),
    F(f64),
}

/// Fold an elementwise operator over inputs `ins` whose contents are known. Integer results
/// that `f` cannot compute become unknown elements; float results must all be computed.
fn fold(c: &Ctx, ins: &[usize], out_dtype: i32, f: &dyn Fn(&[S]) -> Option<S>) -> Option<Out> {
    let vals: Vec<ValueData> = ins
        .iter()
        .map(|&i| c.value_data(i))
        .collect::<Option<_>>()?;
    let dims: Vec<&[i64]> = vals.iter().map(|v| v.dims.as_slice()).collect();
    let (out_dims, maps) = broadcast_index(&dims)?;
    let n = consts::count(&out_dims)?;
    let int_out = is_int_type(out_dtype);
    let mut ints = Vec::new();
    let mut floats = Vec::new();
    for k in 0..n {
        let mut args = Vec::with_capacity(vals.len());
        for (v, m) in vals.iter().zip(&maps) {
            let src = *m.get(k)?;
            args.push(match &v.elems {
                Elems::Ints(x) => S::I(x.get(src)?.clone()),
                Elems::Floats(x) => S::F(*x.get(src)?),
            });
        }
        match (f(&args), int_out) {
            (Some(S::I(d)), true) => ints.push(match d {
                Dim::Known(x) => fit_int(out_dtype, x).map_or(Dim::Unknown, Dim::Known),
                other => other,
            }),
            (None, true) => ints.push(Dim::Unknown),
            (Some(S::F(x)), false) => floats.push(round_float(out_dtype, x)?),
            _ => return None,
        }
    }
    let elems = if int_out {
        Elems::Ints(ints)
    } else {
        Elems::Floats(floats)
    };
    Some(Out::from_data(ValueData::new(out_dtype, out_dims, elems)?))
}

/// Output shape of a broadcasting operator over inputs `ins`: one of theirs, shared, when it
/// is one of them (the usual case: the others are equal or broadcast to it).
fn broadcast_info(c: &Ctx, ins: &[usize]) -> Option<Shape> {
    let shapes: Vec<Option<&[Dim]>> = ins.iter().map(|&i| c.shape(i)).collect();
    let out = broadcast_shapes(&shapes)?;
    for &i in ins {
        if let Some(s) = &c.info(i).shape {
            if **s == *out {
                return Some(s.clone());
            }
        }
    }
    Some(out.into())
}

/// A broadcasting operator (legacy broadcast before `legacy_until`), with optional folding.
fn broadcasting(
    c: &Ctx,
    out_dtype: Option<i32>,
    legacy_until: i64,
    f: Option<ScalarFn>,
) -> Vec<Out> {
    let ins: Vec<usize> = (0..c.n_inputs()).filter(|&i| c.has(i)).collect();
    if ins.len() != c.n_inputs() || ins.is_empty() {
        return vec![Out::dtype(out_dtype)];
    }
    if let (Some(f), Some(t)) = (f, out_dtype) {
        if let Some(o) = fold(c, &ins, t, f) {
            return vec![o];
        }
    }
    let shape = if c.version() < legacy_until {
        c.info(0).shape.clone()
    } else {
        broadcast_info(c, &ins)
    };
    vec![Out::with_shape(out_dtype, shape)]
}

/// A computed element: `None` when it is unknown.
fn known_or_none(d: Dim) -> Option<Dim> {
    (d != Dim::Unknown).then_some(d)
}

fn int2<'a>(a: &'a S, b: &'a S) -> Option<(&'a Dim, &'a Dim)> {
    match (a, b) {
        (S::I(x), S::I(y)) => Some((x, y)),
        _ => None,
    }
}
fn flt2(a: &S, b: &S) -> Option<(f64, f64)> {
    match (a, b) {
        (S::F(x), S::F(y)) => Some((*x, *y)),
        _ => None,
    }
}

fn arith(c: &Ctx, op: char) -> Vec<Out> {
    let fmod = c.attr_i("fmod").unwrap_or(0) != 0;
    let f = move |a: &[S]| -> Option<S> {
        let [a, b] = a else { return None };
        if let Some((x, y)) = int2(a, b) {
            use Dim::*;
            return Some(S::I(match (op, x, y) {
                ('+', Known(p), Known(q)) => Known(p.checked_add(*q)?),
                ('-', Known(p), Known(q)) => Known(p.checked_sub(*q)?),
                ('*', Known(p), Known(q)) => Known(p.checked_mul(*q)?),
                // Integer division truncates toward zero (as ONNX Runtime and the reference
                // implementation do).
                ('/', Known(p), Known(q)) => Known(p.checked_div(*q)?),
                // Names: an expression over them (`past + seq`, `2*batch`); a division only
                // when it is exact (so truncation cannot differ).
                ('+', x, y) => known_or_none(expr::add(x, y))?,
                ('-', x, y) => known_or_none(expr::sub(x, y))?,
                ('*', x, y) => known_or_none(expr::mul(x, y))?,
                ('/', x, y) => known_or_none(expr::div_exact(x, y))?,
                ('%', Known(p), Known(q)) => {
                    let r = p.checked_rem(*q)?;
                    // fmod=0: the result takes the divisor's sign (Python-style).
                    Known(if !fmod && r != 0 && ((r < 0) != (*q < 0)) {
                        r.checked_add(*q)?
                    } else {
                        r
                    })
                }
                _ => return None,
            }));
        }
        let (x, y) = flt2(a, b)?;
        Some(S::F(match op {
            '+' => x + y,
            '-' => x - y,
            '*' => x * y,
            '/' => x / y,
            '%' if fmod => x % y,
            _ => return None,
        }))
    };
    broadcasting(c, c.dtype(0), 7, Some(&f))
}

pub(crate) fn add(c: &Ctx) -> Vec<Out> {
    arith(c, '+')
}
pub(crate) fn sub(c: &Ctx) -> Vec<Out> {
    arith(c, '-')
}
pub(crate) fn mul(c: &Ctx) -> Vec<Out> {
    arith(c, '*')
}
pub(crate) fn div(c: &Ctx) -> Vec<Out> {
    arith(c, '/')
}
pub(crate) fn modulo(c: &Ctx) -> Vec<Out> {
    arith(c, '%')
}

/// `Pow`, bit shifts, `PRelu`-free binary ops keeping input 0's type, without folding.
pub(crate) fn binary_same_type(c: &Ctx) -> Vec<Out> {
    broadcasting(c, c.dtype(0), 7, None)
}

/// `PRelu`: the slope is unidirectionally broadcast to X; Y has X's shape.
pub(crate) fn prelu(c: &Ctx) -> Vec<Out> {
    same(c)
}

fn compare(c: &Ctx, op: &'static str) -> Vec<Out> {
    let f = move |a: &[S]| -> Option<S> {
        let [a, b] = a else { return None };
        let r = if let Some((x, y)) = int2(a, b) {
            match (x, y) {
                (Dim::Known(p), Dim::Known(q)) => match op {
                    "==" => p == q,
                    "<" => p < q,
                    ">" => p > q,
                    "<=" => p <= q,
                    ">=" => p >= q,
                    _ => return None,
                },
                (Dim::Sym(s), Dim::Sym(t)) if s == t => matches!(op, "==" | "<=" | ">="),
                // A size is never negative (exporters test `shape == -1`).
                (Dim::Sym(_), Dim::Known(q)) if *q < 0 => matches!(op, ">" | ">="),
                (Dim::Known(p), Dim::Sym(_)) if *p < 0 => matches!(op, "<" | "<="),
                _ => return None,
            }
        } else {
            let (x, y) = flt2(a, b)?;
            match op {
                "==" => x == y,
                "<" => x < y,
                ">" => x > y,
                "<=" => x <= y,
                ">=" => x >= y,
                _ => return None,
            }
        };
        Some(S::I(Dim::Known(r as i64)))
    };
    broadcasting(c, Some(BOOL), 7, Some(&f))
}

pub(crate) fn equal(c: &Ctx) -> Vec<Out> {
    compare(c, "==")
}
pub(crate) fn less(c: &Ctx) -> Vec<Out> {
    compare(c, "<")
}
pub(crate) fn greater(c: &Ctx) -> Vec<Out> {
    compare(c, ">")
}
pub(crate) fn less_or_equal(c: &Ctx) -> Vec<Out> {
    compare(c, "<=")
}
pub(crate) fn greater_or_equal(c: &Ctx) -> Vec<Out> {
    compare(c, ">=")
}

fn logical(c: &Ctx, op: &'static str) -> Vec<Out> {
    let f = move |a: &[S]| -> Option<S> {
        let [S::I(Dim::Known(x)), S::I(Dim::Known(y))] = a else {
            return None;
        };
        let (x, y) = (*x != 0, *y != 0);
        Some(S::I(Dim::Known(match op {
            "and" => x && y,
            "or" => x || y,
            _ => x ^ y,
        } as i64)))
    };
    broadcasting(c, Some(BOOL), 7, Some(&f))
}

pub(crate) fn and(c: &Ctx) -> Vec<Out> {
    logical(c, "and")
}
pub(crate) fn or(c: &Ctx) -> Vec<Out> {
    logical(c, "or")
}
pub(crate) fn xor(c: &Ctx) -> Vec<Out> {
    logical(c, "xor")
}

/// Bitwise And/Or/Xor: broadcast, input type.
pub(crate) fn bitwise(c: &Ctx) -> Vec<Out> {
    broadcasting(c, c.dtype(0), 0, None)
}

fn extremum(c: &Ctx, max: bool) -> Vec<Out> {
    let f = move |a: &[S]| -> Option<S> {
        let mut acc: Option<S> = None;
        for x in a {
            acc = Some(match (acc, x) {
                (None, x) => x.clone(),
                (Some(S::I(Dim::Known(p))), S::I(Dim::Known(q))) => {
                    S::I(Dim::Known(if max { p.max(*q) } else { p.min(*q) }))
                }
                (Some(S::I(p)), S::I(q)) => {
                    let m = if max {
                        expr::max(&p, q)
                    } else {
                        expr::min(&p, q)
                    };
                    S::I(known_or_none(m)?)
                }
                (Some(S::F(p)), S::F(q)) if !p.is_nan() && !q.is_nan() => {
                    S::F(if max { p.max(*q) } else { p.min(*q) })
                }
                _ => return None,
            });
        }
        acc
    };
    broadcasting(c, c.dtype(0), 0, Some(&f))
}

pub(crate) fn max(c: &Ctx) -> Vec<Out> {
    extremum(c, true)
}
pub(crate) fn min(c: &Ctx) -> Vec<Out> {
    extremum(c, false)
}

/// `Sum`, `Mean`: variadic broadcast.
pub(crate) fn variadic(c: &Ctx) -> Vec<Out> {
    broadcasting(c, c.dtype(0), 0, None)
}

/// `Where(cond, X, Y)`: broadcast of the three, X's type.
pub(crate) fn where_op(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(1).or(c.dtype(2));
    let f = |a: &[S]| -> Option<S> {
        let [S::I(Dim::Known(cond)), x, y] = a else {
            return None;
        };
        Some(if *cond != 0 { x.clone() } else { y.clone() })
    };
    if c.n_inputs() != 3 {
        return vec![Out::dtype(dtype)];
    }
    if let Some(t) = dtype {
        if let Some(o) = fold(c, &[0, 1, 2], t, &f) {
            return vec![o];
        }
    }
    vec![Out::with_shape(dtype, broadcast_info(c, &[0, 1, 2]))]
}

/// A unary map with optional folding (integer / float).
fn unary(c: &Ctx, fi: Option<fn(i64) -> Option<i64>>, ff: Option<fn(f64) -> f64>) -> Vec<Out> {
    if let Some(t) = c.dtype(0) {
        let f = |a: &[S]| -> Option<S> {
            match a {
                [S::I(Dim::Known(x))] => Some(S::I(Dim::Known(fi?(*x)?))),
                [S::F(x)] => Some(S::F(ff?(*x))),
                _ => None,
            }
        };
        if fi.is_some() || ff.is_some() {
            if let Some(o) = fold(c, &[0], t, &f) {
                return vec![o];
            }
        }
    }
    same(c)
}

pub(crate) fn neg(c: &Ctx) -> Vec<Out> {
    unary(c, Some(i64::checked_neg), Some(|x| -x))
}
pub(crate) fn abs(c: &Ctx) -> Vec<Out> {
    unary(c, Some(i64::checked_abs), Some(f64::abs))
}
pub(crate) fn floor(c: &Ctx) -> Vec<Out> {
    unary(c, None, Some(f64::floor))
}
pub(crate) fn ceil(c: &Ctx) -> Vec<Out> {
    unary(c, None, Some(f64::ceil))
}
pub(crate) fn round(c: &Ctx) -> Vec<Out> {
    unary(c, None, Some(f64::round_ties_even))
}
pub(crate) fn sqrt(c: &Ctx) -> Vec<Out> {
    unary(c, None, Some(f64::sqrt))
}
pub(crate) fn reciprocal(c: &Ctx) -> Vec<Out> {
    unary(c, None, Some(|x| 1.0 / x))
}
pub(crate) fn relu(c: &Ctx) -> Vec<Out> {
    unary(
        c,
        Some(|x| Some(x.max(0))),
        Some(|x| if x < 0.0 { 0.0 } else { x }),
    )
}
pub(crate) fn sign(c: &Ctx) -> Vec<Out> {
    unary(
        c,
        Some(|x| Some(x.signum())),
        Some(|x| {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }),
    )
}
pub(crate) fn not(c: &Ctx) -> Vec<Out> {
    unary(c, Some(|x| Some((x == 0) as i64)), None)
}

/// Convert one element to type `to` (`None`: not folded).
fn cast_elem(x: &S, to: i32) -> Option<S> {
    match x {
        S::I(Dim::Known(v)) if is_int_type(to) => Some(S::I(Dim::Known(fit_int(to, *v)?))),
        // A symbolic size stays itself in any wide integer type.
        S::I(d @ Dim::Sym(_)) if matches!(to, 6 | 7 | 12 | 13) => Some(S::I(d.clone())),
        S::I(Dim::Known(v)) if is_float_type(to) => Some(S::F(*v as f64)),
        S::F(v) if is_float_type(to) => Some(S::F(*v)),
        S::F(v) if to == BOOL => Some(S::I(Dim::Known((*v != 0.0) as i64))),
        S::F(v) if is_int_type(to) => {
            let t = v.trunc();
            // Out-of-range float-to-int casts are undefined: not folded.
            if t.is_finite() && t.abs() < 9.0e18 {
                Some(S::I(Dim::Known(fit_int(to, t as i64)?)))
            } else {
                None
            }
        }
        _ => None,
    }
}

fn cast_to(c: &Ctx, to: Option<i32>) -> Vec<Out> {
    let Some(to) = to.filter(|&t| t > 0) else {
        return vec![Out::with_shape(None, c.info(0).shape.clone())];
    };
    let f = move |a: &[S]| -> Option<S> { cast_elem(a.first()?, to) };
    if is_int_type(to) || matches!(to, FLOAT | DOUBLE) {
        if let Some(o) = fold(c, &[0], to, &f) {
            return vec![o];
        }
    }
    vec![Out::with_shape(Some(to), c.info(0).shape.clone())]
}

pub(crate) fn cast(c: &Ctx) -> Vec<Out> {
    let to = c.attr_i("to").and_then(|t| i32::try_from(t).ok());
    cast_to(c, to)
}

pub(crate) fn cast_like(c: &Ctx) -> Vec<Out> {
    cast_to(c, c.dtype(1))
}

/// `Dropout`: output like X; the mask is bool from opset 10 (of X's type before).
pub(crate) fn dropout(c: &Ctx) -> Vec<Out> {
    let mask_t = if c.version() >= 10 {
        Some(BOOL)
    } else {
        c.dtype(0)
    };
    vec![
        Out::info(c.info(0).clone()),
        Out::with_shape(mask_t, c.info(0).shape.clone()),
    ]
}

/// An op whose output type is given by attribute `dtype`, else by input 0 (`EyeLike`,
/// `RandomUniformLike`, `RandomNormalLike`, `Bernoulli`).
pub(crate) fn like_with_dtype_attr(c: &Ctx) -> Vec<Out> {
    let t = c
        .attr_i("dtype")
        .and_then(|t| i32::try_from(t).ok())
        .or(c.dtype(0));
    vec![Out::with_shape(t, c.info(0).shape.clone())]
}

/// `Constant`: the attribute's tensor (or scalar / list forms).
pub(crate) fn constant(c: &Ctx) -> Vec<Out> {
    use crate::tensor::dtype::{INT64, STRING};
    let out = |dtype: i32, dims: Vec<i64>, elems: Option<Elems>| -> Vec<Out> {
        let data = elems.and_then(|e| ValueData::new(dtype, dims.clone(), e));
        match data {
            Some(d) => vec![Out::from_data(d)],
            None => vec![Out::info(super::TensorInfo::known(Some(dtype), &dims))],
        }
    };
    if let Some(t) = c.attr_t("value") {
        let dtype = t.data_type.unwrap_or(0);
        let (k, lazy) = super::consts::read_tensor(t.into());
        let info = super::TensorInfo::known((dtype > 0).then_some(dtype), &t.dims);
        return vec![Out {
            info,
            konst: k,
            data: None,
            lazy,
        }];
    }
    if let Some(sp) = c.node.attr("sparse_value").and_then(|a| a.sparse_tensor()) {
        let dtype = sp
            .values
            .as_ref()
            .and_then(|v| v.data_type)
            .filter(|&d| d > 0);
        return vec![Out::info(super::TensorInfo::known(dtype, &sp.dims))];
    }
    if let Some(f) = c.attr_f("value_float") {
        return out(FLOAT, vec![], Some(Elems::Floats(vec![f as f64])));
    }
    if c.has_attr("value_floats") {
        let v = c.attr_floats("value_floats").unwrap_or(&[]);
        let n = i64::try_from(v.len()).unwrap_or(-1);
        return out(
            FLOAT,
            vec![n],
            Some(Elems::Floats(v.iter().map(|&x| x as f64).collect())),
        );
    }
    if let Some(i) = c.attr_i("value_int") {
        return out(INT64, vec![], Some(Elems::Ints(vec![Dim::Known(i)])));
    }
    if c.has_attr("value_ints") {
        let v = c.attr_ints("value_ints").unwrap_or(&[]);
        let n = i64::try_from(v.len()).unwrap_or(-1);
        return out(
            INT64,
            vec![n],
            Some(Elems::Ints(v.iter().map(|&x| Dim::Known(x)).collect())),
        );
    }
    if c.has_attr("value_string") {
        return out(STRING, vec![], None);
    }
    if c.has_attr("value_strings") {
        let n = c
            .node
            .attr("value_strings")
            .map_or(0, |a| a.strings().len());
        return out(STRING, vec![i64::try_from(n).unwrap_or(-1)], None);
    }
    vec![Out::default()]
}

/// `QuantizeLinear(x, y_scale, y_zero_point)`: x's shape; the type from `output_dtype`
/// (opset 21), else the zero point, else uint8 (QuantizeLinear doc).
pub(crate) fn quantize_linear(c: &Ctx) -> Vec<Out> {
    let t = c
        .attr_i("output_dtype")
        .filter(|&t| t > 0)
        .and_then(|t| i32::try_from(t).ok())
        .or_else(|| {
            if c.has(2) {
                c.dtype(2)
            } else {
                Some(crate::tensor::dtype::UINT8)
            }
        });
    vec![Out::with_shape(t, c.info(0).shape.clone())]
}

/// `DequantizeLinear(x, x_scale, x_zero_point)`: x's shape; the type from `output_dtype`
/// (opset 23), else the scale's (DequantizeLinear doc).
pub(crate) fn dequantize_linear(c: &Ctx) -> Vec<Out> {
    let t = c
        .attr_i("output_dtype")
        .filter(|&t| t > 0)
        .and_then(|t| i32::try_from(t).ok())
        .or(c.dtype(1));
    vec![Out::with_shape(t, c.info(0).shape.clone())]
}

/// `DynamicQuantizeLinear(x)`: y uint8 like x, scalar float scale, scalar uint8 zero point.
pub(crate) fn dynamic_quantize_linear(c: &Ctx) -> Vec<Out> {
    use crate::tensor::dtype::UINT8;
    vec![
        Out::with_shape(Some(UINT8), c.info(0).shape.clone()),
        Out::new(Some(FLOAT), Some(vec![])),
        Out::new(Some(UINT8), Some(vec![])),
    ]
}

/// `RandomUniform`, `RandomNormal`: `shape` attribute, `dtype` attribute (float default).
pub(crate) fn random(c: &Ctx) -> Vec<Out> {
    let t = c
        .attr_i("dtype")
        .and_then(|t| i32::try_from(t).ok())
        .unwrap_or(FLOAT);
    let shape = c
        .attr_ints("shape")
        .map(|s| s.iter().map(|&d| super::dims::known_dim(d)).collect());
    vec![Out::new(Some(t), shape)]
}

/// `SoftmaxCrossEntropyLoss(scores, labels)`, `NegativeLogLikelihoodLoss(input, target)`:
/// a scalar loss, or per element (the labels' shape) with `reduction = "none"`; the
/// optional log_prob output is like the scores.
pub(crate) fn loss(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let shape = match c.attr_s("reduction").unwrap_or("mean") {
        "none" => c.info(1).shape.clone(),
        "mean" | "sum" => Some(Vec::new().into()),
        _ => None,
    };
    vec![Out::with_shape(dtype, shape), Out::info(c.info(0).clone())]
}
