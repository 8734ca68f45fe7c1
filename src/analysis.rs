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

    /// The sizes as people read them: `batch=1, height=960, input 0 axis 2=960`.
    pub fn assumed_text(&self) -> String {
        let mut parts: Vec<String> = self.named.iter().map(|(k, v)| format!("{k}={v}")).collect();
        parts.extend(
            self.positional
                .iter()
                .map(|(i, a, v)| format!("input {i} axis {a}={v}")),
        );
        parts.join(", ")
    }

    /// The sizes for `model`'s open input dimensions. Each open dimension takes, in order:
    /// - `dims` (`NAME=V`, or `INPUT[AXIS]=V` for an unnamed one: the command line);
    /// - `defaults[NAME]` (a target's rule naming the dimension);
    /// - the default of the role its name says ([`name_role`]: `batch_size` is a batch,
    ///   `sequence_length` a sequence, `past_sequence_length` a past, `height` spatial), where
    ///   a *total* sequence (`total_sequence_length`) is the sequence plus the past (the past
    ///   counted only when the model has one);
    /// - the default of its position's role (`batch`: axis 0; `spatial`: axes 2.. of a rank-4
    ///   input);
    /// - `defaults["default"]`;
    /// - `defaults["seq"]`: an open axis of an input that is not an image's is most often a
    ///   sequence (tokens, audio samples, frames).
    ///
    /// A role's default is what `defaults` gives under its key (`batch`, `spatial`, `seq`,
    /// `past`); a role without one leaves the dimension open.
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
        // Every open dimension of the inputs: (input index, axis, rank, its name if any).
        let mut open: Vec<(usize, usize, usize, Option<String>)> = Vec::new();
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
            for (axis, d) in shape.dim.iter().enumerate() {
                match &d.value {
                    Some(DV::DimValue(v)) if *v > 0 => {}
                    Some(DV::DimParam(name)) if !name.is_empty() => {
                        open.push((ii, axis, rank, Some(name.clone())))
                    }
                    _ => open.push((ii, axis, rank, None)),
                }
            }
        }
        // The sequence and the past a total is made of: what the command line or the rule
        // gives a dimension of that role, else the role's default.
        let given_for = |role: Role| -> Option<i64> {
            open.iter()
                .filter_map(|(_, _, _, n)| n.as_ref())
                .filter(|n| name_role(n) == Some(role))
                .find_map(|n| named.get(n).or_else(|| defaults.get(n)).copied())
        };
        let has_past = open
            .iter()
            .any(|(_, _, _, n)| n.as_deref().and_then(name_role) == Some(Role::Past));
        let seq = given_for(Role::Seq).or_else(|| defaults.get("seq").copied());
        let past = if has_past {
            given_for(Role::Past).or_else(|| defaults.get("past").copied())
        } else {
            Some(0)
        };
        let total = match (seq, past) {
            (Some(s), Some(p)) => s.checked_add(p),
            _ => None,
        };
        let role_default = |role: Role| -> Option<i64> {
            match role {
                Role::Batch => defaults.get("batch").copied(),
                Role::Spatial => defaults.get("spatial").copied(),
                Role::Seq => defaults.get("seq").copied(),
                Role::Past => defaults.get("past").copied(),
                Role::Total => total,
            }
        };
        let mut positional = Vec::new();
        for (ii, axis, rank, name) in open {
            let input_name = g.value_name(g.inputs[ii].value).to_string();
            if let Some(v) = by_position.get(&(input_name, axis)) {
                positional.push((ii, axis, *v));
                continue;
            }
            if let Some(name) = &name {
                if named.contains_key(name) {
                    continue;
                }
            }
            let by_position_role = if axis == 0 {
                role_default(Role::Batch)
            } else if rank == 4 && axis >= 2 {
                role_default(Role::Spatial)
            } else {
                None
            };
            let by_name = name.as_ref().and_then(|n| {
                defaults
                    .get(n)
                    .copied()
                    .or_else(|| name_role(n).and_then(role_default))
            });
            let size = by_name
                .or(by_position_role)
                .or(defaults.get("default").copied())
                .or(role_default(Role::Seq));
            let Some(v) = size else { continue };
            match name {
                Some(name) => {
                    named.insert(name, v);
                }
                None => positional.push((ii, axis, v)),
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

/// What a dimension's name says it measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A batch (`batch`, `batch_size`, `N` is not recognised: too short to be sure).
    Batch,
    /// A sequence of tokens, samples or frames (`seq`, `sequence_length`, `seq_len`,
    /// `num_tokens`, `time`, `frames`).
    Seq,
    /// The length of a cache of earlier steps (`past_sequence_length`, `past_seq_len`,
    /// `cache_length`).
    Past,
    /// A past and the new sequence together (`total_sequence_length`, `total_seq_len`).
    Total,
    /// A side of an image (`height`, `width`).
    Spatial,
}

/// The role a dimension's name gives it, when it gives one (case and separators ignored).
pub fn name_role(name: &str) -> Option<Role> {
    let n = name.to_ascii_lowercase();
    let has = |w: &str| n.contains(w);
    let seqish = has("seq") || has("len") || has("token") || has("time") || has("frame");
    if has("past") || has("cache") {
        Some(Role::Past)
    } else if has("total") && seqish {
        Some(Role::Total)
    } else if has("batch") {
        Some(Role::Batch)
    } else if seqish {
        Some(Role::Seq)
    } else if has("height") || has("width") {
        Some(Role::Spatial)
    } else {
        None
    }
}

/// The sizes a target assumes for a sequence and a past when its rules give none: 128 tokens
/// (a short prompt, or a few seconds of 16 kHz audio in 512-sample windows, cut to 128 frames)
/// with a past of 128 (a decoder 128 tokens into its answer). A total sequence is then 256.
pub const DEFAULT_SEQ: i64 = 128;
/// See [`DEFAULT_SEQ`].
pub const DEFAULT_PAST: i64 = 128;

/// The warning for a `--dim NAME` (or Python `dims={NAME: ...}`) that no input of `model`
/// has, naming the dimensions it has: the same words from `verify`, compile and Python.
pub fn unknown_dim_warning(name: &str, model: &std::path::Path, known: &[String]) -> String {
    let has = if known.is_empty() {
        "its inputs have no named dimensions".to_string()
    } else {
        format!("its inputs' dimensions are named {}", known.join(", "))
    };
    format!(
        "--dim {name}: no input of {} has a dimension named '{name}' ({has})",
        model.display()
    )
}
