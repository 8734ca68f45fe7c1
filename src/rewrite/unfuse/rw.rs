//! The toolbox every decomposition uses: a [`Patch`] under construction for one node, with
//! typed constants, attribute readers and builders that pick the form an operator takes at the
//! model's opset (axes as attribute or input, Clip bounds as attributes or inputs, ...).

use crate::ir::{Graph, Node, NodeId, ValueId};
use crate::proto::{AttributeProto, TensorProto};
use crate::rewrite::{AttrValue, PValue, Patch};
use crate::tensor::dtype;

use super::{UnfuseCtx, Unsupported};
use crate::infer::{Facts, TensorInfo};
use crate::rewrite::consts;
use crate::rewrite::pass::{Cause, Refusal};

/// Shorthand for a refusal with a reason.
pub fn unsupported<T>(reason: impl Into<String>) -> Result<T, Unsupported> {
    Err(Refusal::unsupported(reason))
}

/// A refusal with its cause.
fn refuse<T>(cause: Cause, reason: String) -> Result<T, Unsupported> {
    Err(Refusal::new(cause, reason))
}

/// One node being decomposed.
pub struct Rw<'a> {
    pub ctx: &'a UnfuseCtx<'a>,
    pub g: &'a Graph,
    pub id: NodeId,
    pub node: &'a Node,
    pub p: Patch,
    pub opset: i64,
    facts: &'a Facts,
}

impl<'a> Rw<'a> {
    pub fn new(ctx: &'a UnfuseCtx<'a>, g: &'a Graph, id: NodeId) -> Self {
        let node = g.node(id);
        let facts = ctx.facts;
        Rw {
            ctx,
            g,
            id,
            node,
            p: Patch::new(ctx.rule, node.name(), Some(id)),
            opset: ctx.model_opset,
            facts,
        }
    }

    pub fn facts(&self) -> &Facts {
        self.facts
    }

    // ---- inputs and outputs -------------------------------------------------------------

    /// Input `i` if present (not omitted).
    pub fn input_id(&self, i: usize) -> Option<ValueId> {
        self.node.inputs.get(i).copied().flatten()
    }

    pub fn input(&self, i: usize) -> Option<PValue> {
        self.input_id(i).map(PValue::Existing)
    }

    /// A required input.
    pub fn need(&self, i: usize, what: &str) -> Result<PValue, Unsupported> {
        match self.input(i) {
            Some(v) => Ok(v),
            None => unsupported(format!("required input {i} ({what}) is missing")),
        }
    }

    /// What `infer` knows of input `i` (nothing for an omitted input).
    pub fn in_facts(&self, i: usize) -> TensorInfo {
        self.input_id(i)
            .map(|v| self.facts.info(v).clone())
            .unwrap_or_default()
    }

    /// Rank of input `i`, or a refusal naming what needs it.
    pub fn rank(&self, i: usize, why: &str) -> Result<usize, Unsupported> {
        match self.in_facts(i).rank() {
            Some(r) => Ok(r),
            None => refuse(
                Cause::UnknownFact,
                format!("the rank of input {i} is unknown ({why})"),
            ),
        }
    }

    /// The floating-point element type of input `i` (needed for constants).
    pub fn float_dtype(&self, i: usize) -> Result<i32, Unsupported> {
        match self.in_facts(i).dtype {
            Some(t @ (dtype::FLOAT | dtype::FLOAT16 | dtype::DOUBLE | dtype::BFLOAT16)) => Ok(t),
            Some(t) => unsupported(format!(
                "input {i} has element type {}, not a floating-point type",
                crate::tensor::dtype_name(t)
            )),
            None => refuse(
                Cause::UnknownFact,
                format!("the element type of input {i} is unknown (needed for constants)"),
            ),
        }
    }

    pub fn output_id(&self, i: usize) -> Option<ValueId> {
        self.node.outputs.get(i).copied().flatten()
    }

    /// Is output `i` present and read by a node, a subgraph or a graph output (as of the
    /// facts: an over-approximation once patches have been applied, never an under-one)?
    pub fn used(&self, i: usize) -> bool {
        self.output_id(i).is_some_and(|v| self.facts.is_used(v))
    }

    /// The constant integers behind input `i`, if it is a constant.
    pub fn const_ints(&self, i: usize) -> Option<Vec<i64>> {
        consts::const_i64(self.g, self.input_id(i)?, self.ctx.external)
    }

    /// The float32 constant behind input `i`, with its dims.
    pub fn const_f32(&self, i: usize) -> Option<(Vec<i64>, Vec<f32>)> {
        let t = consts::const_tensor(self.g, self.input_id(i)?)?;
        let v = consts::tensor_f32(&t, self.ctx.external)?;
        Some((t.dims, v))
    }

    // ---- attributes -----------------------------------------------------------------------

    pub fn attr(&self, name: &str) -> Option<&'a crate::ir::Attribute> {
        self.node.attr(name)
    }
    pub fn attr_i(&self, name: &str, default: i64) -> i64 {
        self.attr(name).and_then(|a| a.i()).unwrap_or(default)
    }
    pub fn attr_f(&self, name: &str, default: f32) -> f32 {
        self.attr(name).and_then(|a| a.f()).unwrap_or(default)
    }
    pub fn attr_s(&self, name: &str) -> Option<String> {
        self.attr(name)
            .and_then(|a| a.s())
            .map(|s| String::from_utf8_lossy(s).into_owned())
    }
    pub fn attr_ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).map(|a| a.ints().to_vec())
    }
    pub fn attr_floats(&self, name: &str) -> Option<Vec<f32>> {
        self.attr(name).map(|a| a.floats().to_vec())
    }

    /// The original node's attributes whose names are listed (for ops that keep them).
    pub fn copy_attrs(&self, names: &[&str]) -> Vec<AttributeProto> {
        self.node
            .attributes
            .iter()
            .filter(|a| names.contains(&a.name()))
            .map(|a| a.to_proto())
            .collect()
    }

    /// Refuse a node carrying an attribute this decomposition does not know.
    pub fn only_attrs(&self, known: &[&str]) -> Result<(), Unsupported> {
        for a in &self.node.attributes {
            if !known.contains(&a.name()) {
                return unsupported(format!("attribute '{}' is not supported", a.name()));
            }
        }
        Ok(())
    }

    // ---- constants ------------------------------------------------------------------------

    /// A constant tensor of element type `dt` holding `vals` with shape `dims`.
    pub fn constant(&mut self, hint: &str, dt: i32, dims: &[i64], vals: &[f64]) -> PValue {
        self.p.initializer(hint, tensor_of(dt, dims, vals))
    }

    /// A rank-0 constant of element type `dt`.
    pub fn scalar(&mut self, hint: &str, dt: i32, v: f64) -> PValue {
        self.constant(hint, dt, &[], &[v])
    }

    /// A 1-D int64 constant.
    pub fn ints(&mut self, hint: &str, v: &[i64]) -> PValue {
        self.p.initializer(
            hint,
            TensorProto {
                dims: vec![v.len() as i64],
                data_type: Some(dtype::INT64),
                raw_data: Some(
                    v.iter()
                        .flat_map(|x| x.to_le_bytes())
                        .collect::<Vec<_>>()
                        .into(),
                ),
                ..Default::default()
            },
        )
    }

    /// A float32 constant from values.
    pub fn f32s(&mut self, hint: &str, dims: &[i64], v: &[f32]) -> PValue {
        self.p.initializer(
            hint,
            TensorProto {
                dims: dims.to_vec(),
                data_type: Some(dtype::FLOAT),
                raw_data: Some(
                    v.iter()
                        .flat_map(|x| x.to_le_bytes())
                        .collect::<Vec<_>>()
                        .into(),
                ),
                ..Default::default()
            },
        )
    }

    // ---- operators ------------------------------------------------------------------------

    pub fn op(&mut self, op: &str, inputs: &[PValue], attrs: &[(&str, AttrValue)]) -> PValue {
        self.p.op(op, inputs, attrs)
    }

    /// A default-domain node with optional inputs and prebuilt attributes; one output.
    pub fn op_opt(
        &mut self,
        op: &str,
        inputs: &[Option<PValue>],
        attrs: Vec<AttributeProto>,
    ) -> PValue {
        // Trailing optional inputs that are absent are left out rather than written as "":
        // the same operator to ONNX, and some runtimes' kernels (onnxruntime-web's WebGPU Conv)
        // reject an empty input name.
        let n = inputs
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |i| i + 1);
        self.p.node(op, "", &inputs[..n], attrs, 1)[0]
    }

    /// Unsqueeze: axes as attribute before opset 13, as input from 13.
    pub fn unsqueeze(&mut self, x: PValue, axes: &[i64]) -> PValue {
        if self.opset >= 13 {
            let a = self.ints("axes", axes);
            self.op("Unsqueeze", &[x, a], &[])
        } else {
            self.op(
                "Unsqueeze",
                &[x],
                &[("axes", AttrValue::Ints(axes.to_vec()))],
            )
        }
    }

    /// A reduction (ReduceMean, ReduceSum, ...) over `axes`, with the axes in the form the
    /// opset wants: ReduceSum takes them as input from 13, the others from 18.
    pub fn reduce(&mut self, op: &str, x: PValue, axes: &[i64], keepdims: bool) -> PValue {
        let as_input = if op == "ReduceSum" {
            self.opset >= 13
        } else {
            self.opset >= 18
        };
        let keep = ("keepdims", AttrValue::Int(keepdims as i64));
        if as_input {
            let a = self.ints("axes", axes);
            self.op(op, &[x, a], &[keep])
        } else {
            self.op(op, &[x], &[("axes", AttrValue::Ints(axes.to_vec())), keep])
        }
    }

    /// Clip to [min, max]: attributes before opset 11, inputs of the element type from 11.
    pub fn clip(&mut self, x: PValue, min: f32, max: f32, dt: i32) -> PValue {
        if self.opset >= 11 {
            let lo = self.scalar("clip_min", dt, min as f64);
            let hi = self.scalar("clip_max", dt, max as f64);
            self.op("Clip", &[x, lo, hi], &[])
        } else {
            self.op(
                "Clip",
                &[x],
                &[
                    ("min", AttrValue::Float(min)),
                    ("max", AttrValue::Float(max)),
                ],
            )
        }
    }

    /// Softmax over the last axis (the same at every opset: before 13 the input is coerced to
    /// 2-D at `axis`, which for the last axis is a softmax over that axis).
    pub fn softmax_last(&mut self, x: PValue) -> PValue {
        self.op("Softmax", &[x], &[("axis", AttrValue::Int(-1))])
    }

    /// Softmax over the flattened dimensions `axis..` (the Softmax-1/11 definition): native
    /// before opset 13; from 13, Flatten + Softmax(-1) + Reshape back.
    pub fn softmax_flat(&mut self, x: PValue, axis: i64) -> PValue {
        if self.opset < 13 || axis == -1 {
            return self.op("Softmax", &[x], &[("axis", AttrValue::Int(axis))]);
        }
        let shape = self.op("Shape", &[x], &[]);
        let flat = self.op("Flatten", &[x], &[("axis", AttrValue::Int(axis))]);
        let sm = self.softmax_last(flat);
        self.op("Reshape", &[sm, shape], &[])
    }

    /// Slice along `axes` (Slice-1 attributes before opset 10, inputs after).
    pub fn slice(&mut self, x: PValue, starts: &[i64], ends: &[i64], axes: &[i64]) -> PValue {
        if self.opset >= 10 {
            let s = self.ints("starts", starts);
            let e = self.ints("ends", ends);
            let a = self.ints("axes", axes);
            self.op("Slice", &[x, s, e, a], &[])
        } else {
            self.op(
                "Slice",
                &[x],
                &[
                    ("starts", AttrValue::Ints(starts.to_vec())),
                    ("ends", AttrValue::Ints(ends.to_vec())),
                    ("axes", AttrValue::Ints(axes.to_vec())),
                ],
            )
        }
    }

    /// Transpose with a permutation.
    pub fn transpose(&mut self, x: PValue, perm: &[i64]) -> PValue {
        self.op(
            "Transpose",
            &[x],
            &[("perm", AttrValue::Ints(perm.to_vec()))],
        )
    }

    /// Reshape to a constant target (0 copies the input's dimension, -1 is inferred).
    pub fn reshape(&mut self, x: PValue, target: &[i64]) -> Result<PValue, Unsupported> {
        if self.opset < 5 {
            return unsupported("Reshape with a shape input needs opset >= 5");
        }
        let s = self.ints("shape", target);
        Ok(self.op("Reshape", &[x, s], &[]))
    }

    /// Cast to an element type.
    pub fn cast(&mut self, x: PValue, to: i32) -> PValue {
        self.op("Cast", &[x], &[("to", AttrValue::Int(to as i64))])
    }

    /// x * s for a scalar constant s (skipped when s == 1).
    pub fn scale(&mut self, x: PValue, s: f64, dt: i32) -> PValue {
        if s == 1.0 {
            return x;
        }
        let c = self.scalar("scale", dt, s);
        self.op("Mul", &[x, c], &[])
    }

    // ---- finishing ------------------------------------------------------------------------

    /// Re-point each produced output, refuse when a used output is not produced, and remove
    /// the node.
    pub fn finish(mut self, outs: &[(usize, PValue)]) -> Result<Patch, Unsupported> {
        for (slot, v) in self.node.outputs.iter().enumerate() {
            let Some(v) = v else { continue };
            // A value a body reads by name keeps its name: the patch gives it to the
            // replacement (`Patch::apply`).
            match outs.iter().find(|(s, _)| *s == slot) {
                Some((_, new)) => {
                    let mut new = *new;
                    // An existing value cannot take over a graph output's name (it may be a
                    // graph input or another output): give it a node of its own.
                    if matches!(new, PValue::Existing(_))
                        && self.g.outputs.iter().any(|o| o.value == *v)
                    {
                        new = self.op("Identity", &[new], &[]);
                    }
                    self.p.replace(*v, new);
                }
                None if self.used(slot) => {
                    return unsupported(format!(
                        "output {slot} ('{}') is used but this decomposition does not produce it",
                        self.g.value_name(*v)
                    ));
                }
                None => {}
            }
        }
        self.p.remove(self.id);
        Ok(self.p)
    }
}

/// A tensor of element type `dt` (float types) holding `vals`.
pub fn tensor_of(dt: i32, dims: &[i64], vals: &[f64]) -> TensorProto {
    let mut raw: Vec<u8> = Vec::with_capacity(vals.len() * 4);
    for &v in vals {
        match dt {
            dtype::DOUBLE => raw.extend_from_slice(&v.to_le_bytes()),
            dtype::FLOAT16 => raw.extend_from_slice(&f32_to_f16(v as f32).to_le_bytes()),
            dtype::BFLOAT16 => raw.extend_from_slice(&f32_to_bf16(v as f32).to_le_bytes()),
            _ => raw.extend_from_slice(&(v as f32).to_le_bytes()),
        }
    }
    let dt = match dt {
        dtype::DOUBLE | dtype::FLOAT16 | dtype::BFLOAT16 => dt,
        _ => dtype::FLOAT,
    };
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(dt),
        raw_data: Some(raw.into()),
        ..Default::default()
    }
}

/// IEEE half precision, round to nearest even.
pub fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1 << shift) - 1);
        let mut h = m >> shift;
        if rest > half || (rest == half && (h & 1) == 1) {
            h += 1;
        }
        return sign | h as u16;
    }
    let mut h = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && (h & 1) == 1) {
        h += 1;
    }
    sign | h as u16
}

/// bfloat16, round to nearest even.
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((b >> 16) & 1);
    ((b + round) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions_round_to_nearest_even() {
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(0.5), 0x3800);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(1e6), 0x7c00);
        assert_eq!(f32_to_f16(5.960_464_5e-8), 0x0001);
        assert_eq!(f32_to_f16(0.0), 0);
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(-0.5), 0xbf00);
    }
}
