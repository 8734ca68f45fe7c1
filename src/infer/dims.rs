//! Arithmetic on dimensions: checked; on names it gives expressions over them (`expr`), and
//! broadcasting keeps a name only where equal names meet.

use super::{Dim, TensorInfo};

/// A dimension read from a file: a negative size (`-1` is a common "unknown") is unknown.
pub(crate) fn known_dim(d: i64) -> Dim {
    if d >= 0 {
        Dim::Known(d)
    } else {
        Dim::Unknown
    }
}

/// A computed size as a dimension: `None` or negative becomes unknown.
pub(crate) fn opt_dim(d: Option<i64>) -> Dim {
    d.map_or(Dim::Unknown, known_dim)
}

/// Normalize an axis in `[-rank, rank-1]`.
pub(crate) fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { axis.checked_add(r)? } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

/// Normalize a list of axes; `None` when one is out of range or repeated.
pub(crate) fn norm_axes(axes: &[i64], rank: usize) -> Option<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len().min(rank));
    for &a in axes {
        let a = norm_axis(a, rank)?;
        if out.contains(&a) {
            return None;
        }
        out.push(a);
    }
    Some(out)
}

/// Multidirectional (numpy) broadcast of two dimensions, for a valid model: a fixed size
/// other than 1 decides (the other side must be 1 or equal), 1 yields to the other side,
/// equal names stay. Incompatible fixed sizes give `Unknown` (the model is invalid).
pub(crate) fn broadcast_dim(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (Dim::Known(1), x) | (x, Dim::Known(1)) => x.clone(),
        (Dim::Known(p), Dim::Known(q)) => {
            if p == q {
                Dim::Known(*p)
            } else {
                Dim::Unknown
            }
        }
        (Dim::Known(p), _) | (_, Dim::Known(p)) => Dim::Known(*p),
        (Dim::Sym(s), Dim::Sym(t)) if s == t => Dim::Sym(s.clone()),
        _ => Dim::Unknown,
    }
}

/// Multidirectional broadcast of shapes (ONNX Broadcasting.md): right-aligned, missing
/// leading dimensions are 1. `None` when a rank is unknown.
pub(crate) fn broadcast_shapes(shapes: &[Option<&[Dim]>]) -> Option<Vec<Dim>> {
    let mut out: Vec<Dim> = Vec::new();
    for s in shapes {
        let s = (*s)?;
        if s.len() > out.len() {
            let mut padded = vec![Dim::Known(1); s.len() - out.len()];
            padded.append(&mut out);
            out = padded;
        }
        let off = out.len() - s.len();
        for (i, d) in s.iter().enumerate() {
            out[off + i] = broadcast_dim(&out[off + i], d);
        }
    }
    Some(out)
}

/// The product of dimensions: known when all are; with names, their product as an
/// expression (`batch*seq`, `2*N`; see `expr`). Zero times anything is zero.
pub(crate) fn product(dims: &[Dim]) -> Dim {
    let mut acc = Dim::Known(1);
    for d in dims {
        acc = mul(&acc, d);
    }
    acc
}

/// `a + b` as a size (an expression over names where they are symbolic).
pub(crate) fn add(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => opt_dim(x.checked_add(*y)),
        _ => size(super::expr::add(a, b)),
    }
}

/// `a - b` as a size.
pub(crate) fn sub(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => opt_dim(x.checked_sub(*y)),
        _ => size(super::expr::sub(a, b)),
    }
}

/// `a * b` as a size.
pub(crate) fn mul(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => opt_dim(x.checked_mul(*y)),
        _ => size(super::expr::mul(a, b)),
    }
}

/// `a / b` as a size, when `b` divides `a` exactly (else unknown).
pub(crate) fn div_exact(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (Dim::Known(x), Dim::Known(y)) if *y > 0 && x % y == 0 => known_dim(x / y),
        (Dim::Known(_), Dim::Known(_)) => Dim::Unknown,
        _ => size(super::expr::div_exact(a, b)),
    }
}

/// `x - k` as an intermediate value (it may be negative; a later step makes it a size).
pub(crate) fn sub_value(x: &Dim, k: i64) -> Dim {
    match x {
        Dim::Known(v) => v.checked_sub(k).map_or(Dim::Unknown, Dim::Known),
        _ => super::expr::sub(x, &Dim::Known(k)),
    }
}

/// `floor(a / k)` for `k > 0`, as a size (a `floordiv(..)` expression over names).
pub(crate) fn floor_div_dim(a: &Dim, k: i64) -> Dim {
    size(super::expr::floor_div(a, k))
}

/// `max(a, b)` as a size.
pub(crate) fn max(a: &Dim, b: &Dim) -> Dim {
    size(super::expr::max(a, b))
}

/// A computed value as a size: a negative number is none.
fn size(d: Dim) -> Dim {
    match d {
        Dim::Known(k) if k < 0 => Dim::Unknown,
        d => d,
    }
}

/// Merge a declaration with what inference found. Known declared sizes and types win (a
/// disagreement is reported as `true`); inference refines what the declaration leaves open.
pub(crate) fn merge_declared(decl: &TensorInfo, inf: &TensorInfo) -> (TensorInfo, bool) {
    let mut conflict = false;
    let dtype = match (decl.dtype, inf.dtype) {
        (Some(d), Some(i)) => {
            conflict |= d != i;
            Some(d)
        }
        (d, i) => d.or(i),
    };
    let shape = match (&decl.shape, &inf.shape) {
        (Some(d), Some(i)) if d.len() != i.len() => {
            conflict = true;
            Some(d.clone())
        }
        (Some(d), Some(i)) => Some(
            d.iter()
                .zip(i)
                .map(|(d, i)| match (d, i) {
                    (Dim::Known(x), Dim::Known(y)) => {
                        conflict |= x != y;
                        Dim::Known(*x)
                    }
                    (Dim::Known(x), _) => Dim::Known(*x),
                    // A name in a declaration only says "dynamic": a computed size refines
                    // it, and a name derived from the graph inputs relates more values.
                    (_, Dim::Known(y)) => Dim::Known(*y),
                    (_, Dim::Sym(s)) => Dim::Sym(s.clone()),
                    (d, Dim::Unknown) => d.clone(),
                })
                .collect(),
        ),
        (d, i) => d.clone().or_else(|| i.clone()),
    };
    (TensorInfo { dtype, shape }, conflict)
}

/// Merge two facts about the same value from independent sources that must agree (e.g. the
/// branches of an `If`): what they agree on.
pub(crate) fn meet(a: &TensorInfo, b: &TensorInfo) -> TensorInfo {
    let dtype = match (a.dtype, b.dtype) {
        (Some(x), Some(y)) if x == y => Some(x),
        _ => None,
    };
    let shape = match (&a.shape, &b.shape) {
        (Some(x), Some(y)) if x.len() == y.len() => Some(
            x.iter()
                .zip(y)
                .map(|(p, q)| if p == q { p.clone() } else { Dim::Unknown })
                .collect(),
        ),
        _ => None,
    };
    TensorInfo { dtype, shape }
}

/// Combine two dimensions that must be equal (the same axis seen from two inputs): a known
/// size wins, else a name.
pub(crate) fn unify(a: &Dim, b: &Dim) -> Dim {
    match (a, b) {
        (Dim::Known(x), _) => Dim::Known(*x),
        (_, Dim::Known(y)) => Dim::Known(*y),
        (Dim::Sym(s), _) => Dim::Sym(s.clone()),
        (_, Dim::Sym(t)) => Dim::Sym(t.clone()),
        _ => Dim::Unknown,
    }
}

/// `ceil(a / b)` for `b > 0`, checked.
pub(crate) fn ceil_div(a: i64, b: i64) -> Option<i64> {
    if b <= 0 {
        return None;
    }
    let q = a.checked_div(b)?;
    let r = a.checked_rem(b)?;
    if r > 0 {
        q.checked_add(1)
    } else {
        Some(q)
    }
}

/// `floor(a / b)` for `b > 0`, checked.
pub(crate) fn floor_div(a: i64, b: i64) -> Option<i64> {
    if b <= 0 {
        return None;
    }
    let q = a.checked_div(b)?;
    let r = a.checked_rem(b)?;
    if r < 0 {
        q.checked_sub(1)
    } else {
        Some(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Dim {
        Dim::Sym(x.into())
    }

    /// A shape is a vector of dims, one per value of a graph: a dim is two words, a known
    /// size and the variant, not three (a symbol is one pointer).
    #[test]
    fn a_dim_is_two_words() {
        assert_eq!(std::mem::size_of::<Dim>(), 16);
        let n = s("N");
        assert_eq!(n.clone(), n);
        assert_eq!(n.to_string(), "N");
    }

    #[test]
    fn broadcast_rules() {
        use Dim::*;
        assert_eq!(broadcast_dim(&Known(1), &s("N")), s("N"));
        assert_eq!(broadcast_dim(&s("N"), &s("N")), s("N"));
        assert_eq!(broadcast_dim(&s("N"), &s("M")), Unknown);
        assert_eq!(broadcast_dim(&s("N"), &Known(3)), Known(3));
        assert_eq!(broadcast_dim(&Unknown, &Known(1)), Unknown);
        assert_eq!(broadcast_dim(&Known(2), &Known(3)), Unknown);
        let a = [s("N"), Known(3), Known(1)];
        let b = [Known(5)];
        assert_eq!(
            broadcast_shapes(&[Some(&a), Some(&b)]),
            Some(vec![s("N"), Known(3), Known(5)])
        );
    }

    #[test]
    fn products_and_divisions() {
        use Dim::*;
        assert_eq!(product(&[Known(1), s("N"), Known(1)]), s("N"));
        assert_eq!(product(&[Known(2), s("N")]), s("2*N"));
        assert_eq!(product(&[Known(2), Unknown]), Unknown);
        assert_eq!(product(&[Known(0), Unknown]), Known(0));
        assert_eq!(product(&[Known(i64::MAX), Known(2)]), Unknown);
        assert_eq!(ceil_div(7, 2), Some(4));
        assert_eq!(ceil_div(-7, 2), Some(-3));
        assert_eq!(floor_div(-7, 2), Some(-4));
        assert_eq!(ceil_div(1, 0), None);
        assert_eq!(norm_axis(-1, 3), Some(2));
        assert_eq!(norm_axis(3, 3), None);
        assert_eq!(norm_axis(i64::MIN, 3), None);
    }
}
