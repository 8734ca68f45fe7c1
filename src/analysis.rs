//! The one analysis every stage reads: `infer`'s facts about the model's values, under the
//! sizes a compile assumes for the dimensions the file leaves open.
//!
//! Two views of the same inference: with assumed sizes (`--dim`, then the defaults the target's
//! rules give) for matching and work estimates, and without them for what a rewrite may write
//! into the model. Both come from `infer`; nothing else derives shapes or types.

use std::collections::BTreeMap;

use crate::infer::{Facts, InferOptions};
use crate::ir::Model;
use crate::proto::tensor_shape_proto::dimension::Value as DV;

/// Sizes assumed for open dimensions: by name, and by position for unnamed ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sizes {
    /// `dim_param` name -> size.
    pub named: BTreeMap<String, i64>,
    /// (graph input index, axis, size) for dimensions without a name.
    pub positional: Vec<(usize, usize, i64)>,
}

impl Sizes {
    /// No assumption: the declarations only.
    pub fn none() -> Self {
        Sizes::default()
    }

    pub fn is_empty(&self) -> bool {
        self.named.is_empty() && self.positional.is_empty()
    }

    /// The sizes for `model`'s open input dimensions: `dims` first (`NAME=V`, or
    /// `INPUT[AXIS]=V` for an unnamed one), then `defaults` (what the target's rules assume)
    /// by name, by role (`batch`: axis 0; `spatial`: axes 2.. of a rank-4 input) or `default`.
    pub fn for_model(
        model: &Model,
        dims: &BTreeMap<String, i64>,
        defaults: &BTreeMap<String, i64>,
    ) -> Self {
        let mut named: BTreeMap<String, i64> = BTreeMap::new();
        let mut by_position: BTreeMap<(String, usize), i64> = BTreeMap::new();
        for (k, v) in dims {
            match k.strip_suffix(']').and_then(|k| k.rsplit_once('[')) {
                Some((input, axis)) if axis.parse::<usize>().is_ok() => {
                    by_position.insert((input.to_string(), axis.parse().unwrap_or(0)), *v);
                }
                _ => {
                    named.insert(k.clone(), *v);
                }
            }
        }
        let mut positional = Vec::new();
        let g = &model.graph;
        for (ii, i) in g.inputs.iter().enumerate() {
            if g.initializer(i.value).is_some() {
                continue;
            }
            let Some(crate::proto::type_proto::Value::TensorType(t)) =
                i.proto.r#type.as_ref().and_then(|t| t.value.as_ref())
            else {
                continue;
            };
            let Some(shape) = &t.shape else { continue };
            let rank = shape.dim.len();
            let input_name = g.value_name(i.value).to_string();
            for (axis, d) in shape.dim.iter().enumerate() {
                if let Some(v) = by_position.get(&(input_name.clone(), axis)) {
                    positional.push((ii, axis, *v));
                    continue;
                }
                let by_role = if axis == 0 {
                    defaults.get("batch")
                } else if rank == 4 && axis >= 2 {
                    defaults.get("spatial")
                } else {
                    None
                };
                match &d.value {
                    Some(DV::DimParam(name)) if !name.is_empty() => {
                        if named.contains_key(name) {
                            continue;
                        }
                        if let Some(v) = defaults.get(name).or(by_role).or(defaults.get("default"))
                        {
                            named.insert(name.clone(), *v);
                        }
                    }
                    Some(DV::DimValue(v)) if *v > 0 => {}
                    _ => {
                        if let Some(v) = by_role.or(defaults.get("default")) {
                            positional.push((ii, axis, *v));
                        }
                    }
                }
            }
        }
        Sizes { named, positional }
    }

    /// The inference options that apply these sizes.
    pub fn infer_options(&self) -> InferOptions {
        InferOptions {
            dims: self.named.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            input_dims: self.positional.clone(),
            ..Default::default()
        }
    }

    /// Infer the model's main graph (and the bodies its operators need) under these sizes.
    pub fn infer(&self, model: &Model) -> Facts {
        crate::infer::infer_model(model, &self.infer_options())
    }
}
