//! Facts derived from a node, its attributes and the shapes around it: whether a convolution is
//! depthwise or grouped, its kernel size, channels, batch, spatial size, and an estimate of the
//! work (FLOPs) and memory traffic (bytes) of one dispatch.
//!
//! Every fact is either known, not applicable to this op (a fact of the node: `Add` has no
//! kernel), or unknown (a shape is missing) — the matcher treats the last as "no match".

use crate::ir::Attribute;
use crate::ir::{Node, ValueId};
use crate::tensor::elem_size;

use super::pattern::{Fact, Flag, Num};
use super::FactDim;
use crate::infer::Facts;

/// A derived value, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Derived<T> {
    Known(T),
    /// The fact does not apply to this op (this is certain, not unknown).
    NotApplicable(String),
    Unknown(String),
}

/// What a known flag was decided on, written out only when a match is explained.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum FlagWhy {
    Group(i64),
    /// The group and the input channels.
    GroupAndChannels(i64, i64),
}

impl std::fmt::Display for FlagWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FlagWhy::Group(g) => write!(f, "group is {g}"),
            FlagWhy::GroupAndChannels(g, ch) => {
                write!(f, "group is {g} and input channels are {ch}")
            }
        }
    }
}

/// An attribute's value, whatever its type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AttrVal {
    Int(i64),
    Float(f64),
    Str(String),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Strs(Vec<String>),
    /// A tensor, graph or type: never equal to a literal.
    Other(&'static str),
}

impl std::fmt::Display for AttrVal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |f: &mut std::fmt::Formatter<'_>, items: Vec<String>| {
            write!(f, "[{}]", items.join(", "))
        };
        match self {
            AttrVal::Int(i) => write!(f, "{i}"),
            AttrVal::Float(x) => write!(f, "{x}"),
            AttrVal::Str(s) => write!(f, "{s}"),
            AttrVal::Ints(v) => list(f, v.iter().map(|x| x.to_string()).collect()),
            AttrVal::Floats(v) => list(f, v.iter().map(|x| x.to_string()).collect()),
            AttrVal::Strs(v) => list(f, v.clone()),
            AttrVal::Other(k) => write!(f, "a {k}"),
        }
    }
}

pub(crate) fn attr_value(a: &Attribute) -> AttrVal {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let floats = || AttrVal::Floats(a.floats().iter().map(|&x| f64::from(x)).collect());
    let strings = || AttrVal::Strs(a.strings().iter().map(|s| text(s)).collect());
    match a.kind() {
        Some(1) => AttrVal::Float(f64::from(a.f().unwrap_or(0.0))),
        Some(2) => AttrVal::Int(a.i().unwrap_or(0)),
        Some(3) => AttrVal::Str(a.s().map(|s| text(s)).unwrap_or_default()),
        Some(4) | Some(11) => AttrVal::Other("tensor"),
        Some(5) | Some(10) => AttrVal::Other("graph"),
        Some(6) => floats(),
        Some(7) => AttrVal::Ints(a.ints().to_vec()),
        Some(8) => strings(),
        Some(9) | Some(12) => AttrVal::Other("list of tensors"),
        Some(13) | Some(14) => AttrVal::Other("type"),
        // No type recorded (old files): go by the field that is set.
        _ => {
            if !a.ints().is_empty() {
                AttrVal::Ints(a.ints().to_vec())
            } else if !a.floats().is_empty() {
                floats()
            } else if !a.strings().is_empty() {
                strings()
            } else if let Some(s) = a.s() {
                AttrVal::Str(text(s))
            } else if let Some(i) = a.i() {
                AttrVal::Int(i)
            } else if let Some(x) = a.f() {
                AttrVal::Float(f64::from(x))
            } else {
                AttrVal::Other("value")
            }
        }
    }
}

/// The ONNX default of an attribute that a node may leave out, for the attributes rules are
/// likely to test. `None` when this build does not know it.
pub(crate) fn attr_default(domain: &str, op: &str, name: &str) -> Option<AttrVal> {
    use AttrVal::{Float, Int, Str};
    let s = |v: &str| Some(Str(v.to_string()));
    let conv_like = matches!(
        (domain, op),
        (
            "",
            "Conv" | "ConvTranspose" | "ConvInteger" | "QLinearConv" | "DeformConv"
        ) | (
            "com.microsoft",
            "FusedConv" | "NhwcConv" | "NhwcFusedConv" | "QLinearConv"
        ) | ("com.microsoft.nchwc", "Conv")
    );
    let pool = matches!(
        op,
        "MaxPool" | "AveragePool" | "LpPool" | "NhwcMaxPool" | "QLinearAveragePool"
    );
    match name {
        "group" if conv_like => Some(Int(1)),
        "auto_pad" if conv_like || pool => s("NOTSET"),
        "ceil_mode" if pool => Some(Int(0)),
        "count_include_pad" if matches!(op, "AveragePool" | "QLinearAveragePool") => Some(Int(0)),
        "storage_order" if op == "MaxPool" => Some(Int(0)),
        "axis"
            if matches!(
                op,
                "Gather" | "GatherElements" | "ScatterElements" | "Split"
            ) =>
        {
            Some(Int(0))
        }
        "axis" if op == "Flatten" => Some(Int(1)),
        "axis" if matches!(op, "TopK" | "LayerNormalization") => Some(Int(-1)),
        "largest" | "sorted" if op == "TopK" => Some(Int(1)),
        "batch_dims" if op == "GatherND" => Some(Int(0)),
        "reduction" if matches!(op, "ScatterND" | "ScatterElements") => s("none"),
        "mode" if matches!(op, "Resize" | "Upsample") => s("nearest"),
        "coordinate_transformation_mode" if op == "Resize" => s("half_pixel"),
        "nearest_mode" if op == "Resize" => s("round_prefer_floor"),
        "cubic_coeff_a" if op == "Resize" => Some(Float(-0.75)),
        "exclude_outside" | "antialias" if op == "Resize" => Some(Int(0)),
        "keep_aspect_ratio_policy" if op == "Resize" => s("stretch"),
        "alpha" if op == "LeakyRelu" => Some(Float(0.01)),
        "alpha" if matches!(op, "Elu" | "Gemm" | "Celu") => Some(Float(1.0)),
        "beta" if op == "Gemm" => Some(Float(1.0)),
        "transA" | "transB" if matches!(op, "Gemm" | "FusedGemm") => Some(Int(0)),
        "alpha" if op == "HardSigmoid" => Some(Float(0.2)),
        "beta" if op == "HardSigmoid" => Some(Float(0.5)),
        "epsilon"
            if matches!(
                op,
                "BatchNormalization" | "LayerNormalization" | "InstanceNormalization"
            ) =>
        {
            Some(Float(1e-5))
        }
        "saturate" if op == "Cast" => Some(Int(1)),
        "keepdims" if op.starts_with("Reduce") || matches!(op, "ArgMax" | "ArgMin") => Some(Int(1)),
        _ => None,
    }
}

fn attr_i(node: &Node, name: &str) -> Option<i64> {
    match attr_value(node.attr(name)?) {
        AttrVal::Int(i) => Some(i),
        _ => None,
    }
}

fn attr_ints(node: &Node, name: &str) -> Option<Vec<i64>> {
    match attr_value(node.attr(name)?) {
        AttrVal::Ints(v) => Some(v),
        _ => None,
    }
}

fn attr_s(node: &Node, name: &str) -> Option<String> {
    match attr_value(node.attr(name)?) {
        AttrVal::Str(s) => Some(s),
        _ => None,
    }
}

/// The shape of a node's input or output slot.
pub(crate) struct Shapes<'a> {
    pub facts: &'a Facts,
}

fn known_all(dims: &[FactDim]) -> Option<Vec<i64>> {
    dims.iter().map(FactDim::known).collect()
}

fn product(dims: &[i64]) -> f64 {
    dims.iter().map(|&d| d as f64).product()
}

/// A convolution as the facts see it.
struct ConvView<'a> {
    group: i64,
    transpose: bool,
    x: Option<&'a [FactDim]>,
    w: Option<&'a [FactDim]>,
    y: Option<&'a [FactDim]>,
}

impl<'a> Shapes<'a> {
    fn input(&self, node: &Node, slot: usize) -> Option<ValueId> {
        node.inputs.get(slot).copied().flatten()
    }
    fn output(&self, node: &Node, slot: usize) -> Option<ValueId> {
        node.outputs.get(slot).copied().flatten()
    }
    fn in_shape(&self, node: &Node, slot: usize) -> Option<&'a [FactDim]> {
        self.facts.shape(self.input(node, slot)?)
    }
    fn out_shape(&self, node: &Node, slot: usize) -> Option<&'a [FactDim]> {
        self.facts.shape(self.output(node, slot)?)
    }

    fn conv(&self, node: &Node) -> Option<ConvView<'a>> {
        let (w_slot, transpose) = match (node.domain(), node.op_type.as_str()) {
            ("", "Conv" | "ConvInteger" | "DeformConv") => (1, false),
            ("", "ConvTranspose") => (1, true),
            ("", "QLinearConv") => (3, false),
            ("com.microsoft", "FusedConv") => (1, false),
            ("com.microsoft", "ConvTransposeWithDynamicPads") => (1, true),
            ("com.microsoft.nchwc", "Conv") => (1, false),
            _ => return None,
        };
        Some(ConvView {
            group: attr_i(node, "group").unwrap_or(1),
            transpose,
            x: self.in_shape(node, 0),
            w: self.in_shape(node, w_slot),
            y: self.out_shape(node, 0),
        })
    }

    fn is_pool(node: &Node) -> bool {
        matches!(
            node.op_type.as_str(),
            "MaxPool"
                | "AveragePool"
                | "LpPool"
                | "MaxUnpool"
                | "NhwcMaxPool"
                | "QLinearAveragePool"
                | "MaxpoolWithMask"
        )
    }

    fn is_global_pool(node: &Node) -> bool {
        matches!(
            node.op_type.as_str(),
            "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool" | "QLinearGlobalAveragePool"
        )
    }

    /// Input channels of a convolution: dim 1 of X, else from the weights.
    fn conv_in_channels(&self, c: &ConvView) -> Derived<i64> {
        if let Some(ch) = c.x.as_ref().and_then(|x| x.get(1)).and_then(FactDim::known) {
            return Derived::Known(ch);
        }
        let from_w = c.w.as_ref().and_then(|w| {
            if c.transpose {
                w.first().and_then(FactDim::known)
            } else {
                w.get(1)
                    .and_then(FactDim::known)
                    .and_then(|k| k.checked_mul(c.group))
            }
        });
        match from_w {
            Some(ch) => Derived::Known(ch),
            None => Derived::Unknown(
                "input 0's channel dimension and the weights' shape are unknown".to_string(),
            ),
        }
    }

    fn conv_out_channels(&self, c: &ConvView) -> Derived<i64> {
        let from_w = c.w.as_ref().and_then(|w| {
            if c.transpose {
                w.get(1)
                    .and_then(FactDim::known)
                    .and_then(|k| k.checked_mul(c.group))
            } else {
                w.first().and_then(FactDim::known)
            }
        });
        if let Some(m) = from_w {
            return Derived::Known(m);
        }
        match c.y.as_ref().and_then(|y| y.get(1)).and_then(FactDim::known) {
            Some(m) => Derived::Known(m),
            None => Derived::Unknown(
                "the weights' shape and output 0's channel dimension are unknown".to_string(),
            ),
        }
    }

    /// Spatial kernel extents of a convolution or pool.
    fn kernel_dims(&self, node: &Node) -> Derived<Vec<i64>> {
        if let Some(k) = attr_ints(node, "kernel_shape") {
            return Derived::Known(k);
        }
        if let Some(c) = self.conv(node) {
            return match c.w.as_ref().and_then(|w| known_all(w.get(2..)?)) {
                Some(k) => Derived::Known(k),
                None => Derived::Unknown(
                    "no kernel_shape attribute and the weights' shape is unknown".to_string(),
                ),
            };
        }
        if Self::is_global_pool(node) {
            return match self.in_shape(node, 0).and_then(|x| known_all(x.get(2..)?)) {
                Some(k) => Derived::Known(k),
                None => Derived::Unknown("input 0's spatial shape is unknown".to_string()),
            };
        }
        if Self::is_pool(node) {
            return Derived::Unknown("the pool has no kernel_shape attribute".to_string());
        }
        Derived::NotApplicable(format!("{} is not a convolution or pool", node.op_type))
    }

    pub(crate) fn flag(&self, node: &Node, flag: Flag) -> Derived<(bool, FlagWhy)> {
        let Some(c) = self.conv(node) else {
            return Derived::NotApplicable(format!("{} is not a convolution", node.op_type));
        };
        match flag {
            Flag::Grouped => Derived::Known((c.group > 1, FlagWhy::Group(c.group))),
            Flag::Depthwise => {
                if c.group <= 1 {
                    return Derived::Known((false, FlagWhy::Group(c.group)));
                }
                match self.conv_in_channels(&c) {
                    Derived::Known(ch) => {
                        Derived::Known((ch == c.group, FlagWhy::GroupAndChannels(c.group, ch)))
                    }
                    Derived::Unknown(why) => Derived::Unknown(why),
                    Derived::NotApplicable(why) => Derived::NotApplicable(why),
                }
            }
        }
    }

    pub(crate) fn fact(&self, node: &Node, fact: Fact) -> Derived<Num> {
        let int = |d: Derived<i64>| match d {
            Derived::Known(x) => Derived::Known(Num::Int(x)),
            Derived::Unknown(w) => Derived::Unknown(w),
            Derived::NotApplicable(w) => Derived::NotApplicable(w),
        };
        match fact {
            Fact::Kernel => match self.kernel_dims(node) {
                Derived::Known(k) if k.is_empty() => {
                    Derived::NotApplicable("the kernel has no spatial dimensions".to_string())
                }
                Derived::Known(k) => Derived::Known(Num::Int(k.iter().copied().max().unwrap_or(0))),
                Derived::Unknown(w) => Derived::Unknown(w),
                Derived::NotApplicable(w) => Derived::NotApplicable(w),
            },
            Fact::Channels => match self.conv(node) {
                Some(c) => int(self.conv_in_channels(&c)),
                None => int(self.dim_of(node, 0, 1, true)),
            },
            Fact::OutChannels => match self.conv(node) {
                Some(c) => int(self.conv_out_channels(&c)),
                None => int(self.dim_of(node, 0, 1, false)),
            },
            Fact::Batch => int(self.dim_of(node, 0, 0, true)),
            Fact::Spatial => match self.in_shape(node, 0) {
                None => Derived::Unknown("input 0 shape is unknown".to_string()),
                Some(x) if x.len() < 3 => Derived::NotApplicable(format!(
                    "input 0 has rank {}, no spatial dimensions",
                    x.len()
                )),
                Some(x) => match known_all(&x[2..]) {
                    Some(sp) => match sp.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d)) {
                        Some(p) => Derived::Known(Num::Int(p)),
                        None => Derived::Known(Num::Float(product(&sp))),
                    },
                    None => Derived::Unknown(format!(
                        "input 0's spatial dimensions are not all known ({})",
                        show_dims(x)
                    )),
                },
            },
            Fact::Work => match self.work(node) {
                Ok(w) => Derived::Known(Num::Float(w)),
                Err(why) => Derived::Unknown(why),
            },
            Fact::Bytes => match self.bytes(node) {
                Ok(b) => Derived::Known(Num::Float(b)),
                Err(why) => Derived::Unknown(why),
            },
        }
    }

    /// Dimension `axis` of input (or output) `slot`.
    fn dim_of(&self, node: &Node, slot: usize, axis: usize, input: bool) -> Derived<i64> {
        let what = if input { "input" } else { "output" };
        let shape = if input {
            if self.input(node, slot).is_none() {
                return Derived::NotApplicable(format!("{what} {slot} is absent"));
            }
            self.in_shape(node, slot)
        } else {
            if self.output(node, slot).is_none() {
                return Derived::NotApplicable(format!("{what} {slot} is absent"));
            }
            self.out_shape(node, slot)
        };
        match shape {
            None => Derived::Unknown(format!("{what} {slot} shape is unknown")),
            Some(s) if s.len() <= axis => Derived::NotApplicable(format!(
                "{what} {slot} has rank {}, no dimension {axis}",
                s.len()
            )),
            Some(s) => match &s[axis] {
                FactDim::Known(d) => Derived::Known(*d),
                FactDim::Sym(name) => Derived::Unknown(format!(
                    "{what} {slot} dimension {axis} is symbolic ({name})"
                )),
                FactDim::Unknown => {
                    Derived::Unknown(format!("{what} {slot} dimension {axis} is unknown"))
                }
            },
        }
    }

    fn known_shape(&self, v: Option<&[FactDim]>, what: &str) -> Result<Vec<i64>, String> {
        let s = v.ok_or_else(|| format!("{what} shape is unknown"))?;
        known_all(s).ok_or_else(|| format!("{what} shape is not static ({})", show_dims(s)))
    }

    /// Estimated FLOPs of one dispatch (a multiply-add counts 2).
    fn work(&self, node: &Node) -> Result<f64, String> {
        if let Some(c) = self.conv(node) {
            let x = self.known_shape(c.x, "input 0")?;
            let w = self.known_shape(c.w, "the weights'")?;
            if x.len() < 3 || w.len() != x.len() {
                return Err("the convolution's input and weights have unexpected ranks".to_string());
            }
            let k = product(&w[2..]);
            let g = c.group.max(1) as f64;
            if c.transpose {
                // Every input element scatters into M/group outputs per kernel tap.
                return Ok(2.0 * product(&x) * w[1] as f64 * k);
            }
            let out_sp = match c.y.as_ref().and_then(|y| known_all(y.get(2..)?)) {
                Some(sp) if sp.len() == x.len() - 2 => sp,
                _ => conv_out_spatial(node, &x[2..], &w[2..]).ok_or_else(|| {
                    "output 0 shape is unknown and cannot be computed".to_string()
                })?,
            };
            let cin_per_group = x[1] as f64 / g;
            return Ok(2.0 * x[0] as f64 * w[0] as f64 * product(&out_sp) * cin_per_group * k);
        }
        let op = node.op_type.as_str();
        match op {
            "MatMul" | "FusedMatMul" | "MatMulInteger" | "TransposeMatMul" => {
                let a = self.known_shape(self.in_shape(node, 0), "input 0")?;
                let b = self.known_shape(self.in_shape(node, 1), "input 1")?;
                let (ta, tb) = (
                    attr_i(node, "transA").unwrap_or(0) != 0,
                    attr_i(node, "transB").unwrap_or(0) != 0,
                );
                matmul_flops(&a, &b, ta, tb).ok_or_else(|| "unexpected MatMul ranks".to_string())
            }
            "Gemm" | "FusedGemm" => {
                let a = self.known_shape(self.in_shape(node, 0), "input 0")?;
                let b = self.known_shape(self.in_shape(node, 1), "input 1")?;
                if a.len() != 2 || b.len() != 2 {
                    return Err("Gemm inputs are not matrices".to_string());
                }
                let ta = attr_i(node, "transA").unwrap_or(0) != 0;
                let tb = attr_i(node, "transB").unwrap_or(0) != 0;
                let (m, k) = if ta { (a[1], a[0]) } else { (a[0], a[1]) };
                let n = if tb { b[0] } else { b[1] };
                Ok(2.0 * m as f64 * n as f64 * k as f64)
            }
            _ if Self::is_pool(node) || Self::is_global_pool(node) => {
                let x = self.known_shape(self.in_shape(node, 0), "input 0")?;
                let k = match self.kernel_dims(node) {
                    Derived::Known(k) => k,
                    Derived::Unknown(w) | Derived::NotApplicable(w) => return Err(w),
                };
                let out = match self.out_shape(node, 0).and_then(known_all) {
                    Some(y) => product(&y),
                    None if Self::is_global_pool(node) => product(&x[..2.min(x.len())]),
                    None => {
                        let sp = conv_out_spatial(node, x.get(2..).unwrap_or(&[]), &k)
                            .ok_or_else(|| "output 0 shape is unknown".to_string())?;
                        product(&x[..2.min(x.len())]) * product(&sp)
                    }
                };
                Ok(out * product(&k))
            }
            _ => {
                // Element-wise and data movement: one unit per element of the larger of
                // input 0 and output 0.
                let y = self.known_shape(self.out_shape(node, 0), "output 0")?;
                let x = match self.input(node, 0) {
                    Some(_) => product(&self.known_shape(self.in_shape(node, 0), "input 0")?),
                    None => 0.0,
                };
                Ok(product(&y).max(x))
            }
        }
    }

    /// Bytes read and written by one dispatch: every present input and output.
    fn bytes(&self, node: &Node) -> Result<f64, String> {
        let mut total = 0.0;
        let ins = node
            .inputs
            .iter()
            .enumerate()
            .map(|(i, v)| ("input", i, *v));
        let outs = node
            .outputs
            .iter()
            .enumerate()
            .map(|(i, v)| ("output", i, *v));
        for (what, slot, v) in ins.chain(outs) {
            let Some(v) = v else { continue };
            let name = format!("{what} {slot}");
            let s = self.known_shape(self.facts.shape(v), &name)?;
            let t = self
                .facts
                .dtype(v)
                .ok_or_else(|| format!("{name} dtype is unknown"))?;
            total += product(&s) * elem_size(t) as f64;
        }
        Ok(total)
    }
}

/// Output spatial size of a convolution or pool from input size, kernel and attributes.
fn conv_out_spatial(node: &Node, input: &[i64], kernel: &[i64]) -> Option<Vec<i64>> {
    let r = input.len();
    if kernel.len() != r {
        return None;
    }
    let strides = attr_ints(node, "strides").unwrap_or_else(|| vec![1; r]);
    let dil = attr_ints(node, "dilations").unwrap_or_else(|| vec![1; r]);
    let pads = attr_ints(node, "pads").unwrap_or_else(|| vec![0; 2 * r]);
    let auto = attr_s(node, "auto_pad").unwrap_or_else(|| "NOTSET".to_string());
    let ceil = attr_i(node, "ceil_mode").unwrap_or(0) != 0;
    if strides.len() != r || dil.len() != r || pads.len() != 2 * r {
        return None;
    }
    // Sizes come from the file: checked arithmetic, `None` on overflow or a non-positive size.
    (0..r)
        .map(|i| {
            let s = strides[i].max(1);
            let eff = dil[i]
                .checked_mul(kernel[i].checked_sub(1)?)?
                .checked_add(1)?;
            let out = match auto.as_str() {
                "SAME_UPPER" | "SAME_LOWER" => input[i].checked_add(s - 1)? / s,
                "VALID" => {
                    let span = input[i].checked_sub(eff)?;
                    if span < 0 {
                        return None;
                    }
                    span / s + 1
                }
                _ => {
                    let span = input[i]
                        .checked_add(pads[i])?
                        .checked_add(pads[i + r])?
                        .checked_sub(eff)?;
                    if span < 0 {
                        return None;
                    }
                    if ceil {
                        span.checked_add(s - 1)? / s + 1
                    } else {
                        span / s + 1
                    }
                }
            };
            (out > 0).then_some(out)
        })
        .collect()
}

/// FLOPs of a (batched, broadcasting) matrix product.
fn matmul_flops(a: &[i64], b: &[i64], ta: bool, tb: bool) -> Option<f64> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let (m, k) = match a.len() {
        1 => (1, a[0]),
        n if ta => (a[n - 1], a[n - 2]),
        n => (a[n - 2], a[n - 1]),
    };
    let n = match b.len() {
        1 => 1,
        l if tb => b[l - 2],
        l => b[l - 1],
    };
    let batch_a = if a.len() > 2 {
        &a[..a.len() - 2]
    } else {
        &[][..]
    };
    let batch_b = if b.len() > 2 {
        &b[..b.len() - 2]
    } else {
        &[][..]
    };
    let r = batch_a.len().max(batch_b.len());
    let mut batch = 1.0;
    for i in 0..r {
        let da = batch_a.len().checked_sub(r - i).map_or(1, |j| batch_a[j]);
        let db = batch_b.len().checked_sub(r - i).map_or(1, |j| batch_b[j]);
        batch *= da.max(db) as f64;
    }
    Some(2.0 * batch * m as f64 * n as f64 * k as f64)
}

/// `[N, 3, ?, 64]`.
pub(crate) fn show_dims(d: &[FactDim]) -> String {
    let items: Vec<String> = d.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul() {
        assert_eq!(matmul_flops(&[2, 3], &[3, 4], false, false), Some(48.0));
        assert_eq!(matmul_flops(&[5, 2, 3], &[3, 4], false, false), Some(240.0));
        assert_eq!(matmul_flops(&[3], &[3, 4], false, false), Some(24.0));
        assert_eq!(matmul_flops(&[3, 2], &[4, 3], true, true), Some(48.0));
    }
}
