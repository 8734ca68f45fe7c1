//! EmbedLayerNormalization and QEmbedLayerNormalization (ONNX Runtime contrib operators, the
//! BERT embedding block its transformer optimizer fuses): word, position and segment
//! embedding lookups, their sum, and a layer normalization of it.
//!
//! As ONNX Runtime's CPU kernels compute them (`contrib_ops/cpu/bert/embed_layer_norm.cc`,
//! `qembed_layer_norm.cc`), per token:
//! * `x = word[input_ids] + position[p] (+ segment[segment_ids])`, summed in that order, with
//!   `p` the token's index in the sequence, or `position_ids[b, s]` (`position_ids[0, s]` for
//!   a `[1, S]` input);
//! * `embedding_sum` (output 2) is `x`;
//! * `y = (x - mean) / sqrt(mean((x - mean)^2) + epsilon) * gamma + beta` (a division, as the
//!   kernel does, not a multiplication by the reciprocal);
//! * `mask_index` (output 1, int32 `[B]`) counts the mask entries equal to 1 per batch row;
//!   zeros without a mask.
//!
//! QEmbedLayerNormalization dequantizes each table, gamma and beta with its scalar scale and
//! zero point (`(q - zp) * scale` in float, what DequantizeLinear computes); the lookup is done
//! on the quantized table, then dequantized (the same values). float16 is computed in float32
//! and cast back. The reductions may sum in another order than the kernel's loop: Rounding.

use crate::ir::{Graph, NodeId};
use crate::rewrite::{AttrValue, PValue, Patch};
use crate::tensor::dtype;

use super::rotary::{dim_scalar, range};
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

const INPUT_IDS: usize = 0;
const SEGMENT_IDS: usize = 1;
const WORD: usize = 2;
const POSITION: usize = 3;
const SEGMENT: usize = 4;
const GAMMA: usize = 5;
const BETA: usize = 6;
const MASK: usize = 7;
const POSITION_IDS: usize = 8;

fn check_int32(rw: &Rw, i: usize, what: &str) -> Result<(), Unsupported> {
    match rw.in_facts(i).dtype {
        Some(dtype::INT32) => Ok(()),
        Some(t) => unsupported(format!(
            "{what} has element type {}, not int32",
            crate::tensor::dtype_name(t)
        )),
        None => unsupported(format!("the element type of {what} is unknown")),
    }
}

/// Rows `ids` (int32) of a table.
fn lookup(rw: &mut Rw, table: PValue, ids: PValue) -> PValue {
    rw.op("Gather", &[table, ids], &[("axis", AttrValue::Int(0))])
}

/// How a table becomes float: as is (float32), a Cast (float16/bfloat16), or a
/// DequantizeLinear with its scale and zero point (the quantized operator).
enum Table {
    Plain,
    Quantized,
}

/// Input `i` (a table, gamma or beta) looked up at `ids` (when given), in float32.
fn table_rows(
    rw: &mut Rw,
    kind: &Table,
    i: usize,
    ids: Option<PValue>,
    what: &str,
) -> Result<PValue, Unsupported> {
    let t = rw.need(i, what)?;
    let rows = match ids {
        Some(ids) => lookup(rw, t, ids),
        None => t,
    };
    match kind {
        Table::Plain => Ok(match rw.in_facts(i).dtype {
            Some(dtype::FLOAT) => rows,
            Some(dtype::FLOAT16 | dtype::BFLOAT16) => rw.cast(rows, dtype::FLOAT),
            Some(t) => {
                return unsupported(format!(
                    "{what} has element type {}",
                    crate::tensor::dtype_name(t)
                ))
            }
            None => return unsupported(format!("the element type of {what} is unknown")),
        }),
        Table::Quantized => {
            // Scales at 8 + k, zero points at 13 + k, for the k-th quantized input.
            let k = i - WORD;
            let scale = rw.need(8 + k, &format!("{what} scale"))?;
            let zp = rw.need(13 + k, &format!("{what} zero point"))?;
            for j in [8 + k, 13 + k] {
                match rw.in_facts(j).shape.as_ref().map(|s| s.len()) {
                    Some(0) => {}
                    Some(1) if rw.in_facts(j).dim(0) == Some(1) => {}
                    _ => {
                        return unsupported(format!(
                            "the {what} scale/zero point is not a scalar (per-tensor quantization only)"
                        ))
                    }
                }
            }
            if !matches!(rw.in_facts(i).dtype, Some(dtype::INT8 | dtype::UINT8)) {
                return unsupported(format!("{what} is not int8/uint8"));
            }
            if rw.in_facts(8 + k).dtype != Some(dtype::FLOAT) {
                return unsupported(format!("the {what} scale is not float"));
            }
            Ok(rw.op("DequantizeLinear", &[rows, scale, zp], &[]))
        }
    }
}

fn embed(ctx: &UnfuseCtx, g: &Graph, n: NodeId, kind: Table) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["epsilon", "mask_index_type"])?;
    if rw.opset < 11 {
        return unsupported(format!(
            "EmbedLayerNormalization needs opset >= 11 (Range), the model has {}",
            rw.opset
        ));
    }
    if rw.attr_i("mask_index_type", 1) != 1 && rw.used(1) {
        return unsupported(format!(
            "mask_index_type {} (only the key-count mask index)",
            rw.attr_i("mask_index_type", 1)
        ));
    }
    let eps = rw.attr_f("epsilon", 1e-12);
    let ids = rw.need(INPUT_IDS, "input_ids")?;
    check_int32(&rw, INPUT_IDS, "input_ids")?;
    if rw.rank(INPUT_IDS, "input_ids layout")? != 2 {
        return unsupported("input_ids must be 2-D (batch, sequence)");
    }
    let out_dt = match kind {
        Table::Plain => rw.float_dtype(WORD)?,
        Table::Quantized => dtype::FLOAT,
    };
    let quantized = matches!(kind, Table::Quantized);
    // The quantized operator has no position_ids (its input 8 is the word table's scale).
    let position_ids = if quantized {
        None
    } else {
        rw.input(POSITION_IDS)
    };
    let seg = match (rw.input(SEGMENT_IDS), rw.input(SEGMENT)) {
        (Some(s), Some(_)) => {
            check_int32(&rw, SEGMENT_IDS, "segment_ids")?;
            Some(s)
        }
        (None, None) => None,
        _ => return unsupported("segment_ids and segment_embedding must be both present"),
    };

    let word = table_rows(&mut rw, &kind, WORD, Some(ids), "word_embedding")?;
    let pos_ids = match position_ids {
        Some(p) => {
            check_int32(&rw, POSITION_IDS, "position_ids")?;
            if rw.rank(POSITION_IDS, "position_ids layout")? != 2 {
                return unsupported("position_ids must be 2-D ([batch or 1, sequence])");
            }
            p
        }
        None => {
            let known = rw.in_facts(INPUT_IDS).dim(1);
            let s = dim_scalar(&mut rw, ids, 1, known);
            range(&mut rw, s)
        }
    };
    let pos = table_rows(
        &mut rw,
        &kind,
        POSITION,
        Some(pos_ids),
        "position_embedding",
    )?;
    let mut x = rw.op("Add", &[word, pos], &[]);
    if let Some(s) = seg {
        let se = table_rows(&mut rw, &kind, SEGMENT, Some(s), "segment_embedding")?;
        x = rw.op("Add", &[x, se], &[]);
    }
    let mean = rw.reduce("ReduceMean", x, &[-1], true);
    let d = rw.op("Sub", &[x, mean], &[]);
    let sq = rw.op("Mul", &[d, d], &[]);
    let var = rw.reduce("ReduceMean", sq, &[-1], true);
    let epsv = rw.scalar("epsilon", dtype::FLOAT, eps as f64);
    let ve = rw.op("Add", &[var, epsv], &[]);
    let e = rw.op("Sqrt", &[ve], &[]);
    let nrm = rw.op("Div", &[d, e], &[]);
    let gamma = table_rows(&mut rw, &kind, GAMMA, None, "gamma")?;
    let mut y = rw.op("Mul", &[nrm, gamma], &[]);
    if rw.input(BETA).is_some() {
        let beta = table_rows(&mut rw, &kind, BETA, None, "beta")?;
        y = rw.op("Add", &[y, beta], &[]);
    }
    let mut sum = x;
    if out_dt != dtype::FLOAT {
        y = rw.cast(y, out_dt);
        sum = rw.cast(sum, out_dt);
    }
    let mut outs = vec![(0, y), (2, sum)];
    if rw.used(1) {
        let zero = rw.p.initializer(
            "zero_i32",
            crate::proto::TensorProto {
                dims: vec![],
                data_type: Some(dtype::INT32),
                raw_data: Some(0i32.to_le_bytes().to_vec().into()),
                ..Default::default()
            },
        );
        let counted = match rw.input(MASK) {
            Some(m) => {
                check_int32(&rw, MASK, "mask")?;
                let one = rw.p.initializer(
                    "one_i32",
                    crate::proto::TensorProto {
                        dims: vec![],
                        data_type: Some(dtype::INT32),
                        raw_data: Some(1i32.to_le_bytes().to_vec().into()),
                        ..Default::default()
                    },
                );
                let is_one = rw.op("Equal", &[m, one], &[]);
                rw.cast(is_one, dtype::INT32)
            }
            None => rw.op("Mul", &[ids, zero], &[]),
        };
        let mi = rw.reduce("ReduceSum", counted, &[1], false);
        outs.push((1, mi));
    }
    rw.finish(&outs)
}

/// com.microsoft EmbedLayerNormalization.
pub fn embed_layer_norm(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    embed(ctx, g, n, Table::Plain)
}

/// com.microsoft QEmbedLayerNormalization (per-tensor int8/uint8 tables, gamma and beta).
pub fn qembed_layer_norm(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    embed(ctx, g, n, Table::Quantized)
}
