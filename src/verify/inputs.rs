//! Model inputs: random ones (deterministic per seed, honouring dtypes, shapes and index
//! ranges) or real ones read from `.npz`, `.npy` or `TensorProto` files.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Serialize;

use super::pb;
use crate::runtime::run::dtype::{f32_to_bf16, f32_to_f16, DType};
use crate::runtime::run::error::VerifyError;
use crate::runtime::run::model::{Dim, IndexBound, InputRole, ModelInfo, ValueSpec};
use crate::runtime::run::npz;
use crate::runtime::run::tensor::{element_count, fmt_shape, HostTensor, TensorData};

/// Integer inputs that reach an index position of unknown size take values below this.
pub const SMALL_INDEX_RANGE: i64 = 2;
/// Other integer inputs take values in `0..GENERIC_INT_RANGE`.
pub const GENERIC_INT_RANGE: i64 = 10;
/// Float inputs used as Resize/Upsample scales take values in this range.
pub const SCALE_RANGE: (f64, f64) = (1.0, 3.0);
/// Refuse to generate inputs larger than this many elements (a likely mistake in `--dim`).
pub const MAX_INPUT_ELEMENTS: usize = 1 << 28;

/// splitmix64: small, fast, and good enough for test data.
#[derive(Debug, Clone)]
pub struct Prng(u64);

impl Prng {
    pub fn new(seed: u64) -> Prng {
        Prng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[lo, hi)` (`lo` when the range is empty).
    pub fn range_i64(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = (hi as i128 - lo as i128) as u128;
        (lo as i128 + (self.next_u64() as u128 % span) as i128) as i64
    }
}

/// The seed of run `run` (0-based) from a base seed: distinct, well-mixed values.
pub fn run_seed(base: u64, run: usize) -> u64 {
    Prng::new(base ^ (run as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)).next_u64()
}

/// Values for symbolic or unknown dimensions, from `--dim`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DimOverrides {
    /// `NAME=VALUE`: a `dim_param` name.
    pub by_name: BTreeMap<String, usize>,
    /// `INPUT[AXIS]=VALUE`: one axis of one input.
    pub by_axis: BTreeMap<(String, usize), usize>,
}

impl DimOverrides {
    /// Parses `NAME=VALUE` and `INPUT[AXIS]=VALUE` items.
    pub fn parse(items: &[String]) -> Result<DimOverrides, String> {
        let mut d = DimOverrides::default();
        for item in items {
            let (key, value) = item.rsplit_once('=').ok_or_else(|| {
                format!("--dim '{item}': expected NAME=VALUE or INPUT[AXIS]=VALUE")
            })?;
            let value: usize = value
                .trim()
                .parse()
                .map_err(|_| format!("--dim '{item}': '{value}' is not a non-negative integer"))?;
            let key = key.trim();
            if key.is_empty() {
                return Err(format!("--dim '{item}': empty name"));
            }
            if let Some((input, axis)) = key.strip_suffix(']').and_then(|k| k.rsplit_once('[')) {
                if let Ok(axis) = axis.parse::<usize>() {
                    let _ = d.by_axis.insert((input.to_string(), axis), value);
                    continue;
                }
            }
            let _ = d.by_name.insert(key.to_string(), value);
        }
        Ok(d)
    }
}

/// Sizes for dimensions nobody named: axis 0 (the batch, usually) and the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DimDefaults {
    pub batch: usize,
    pub other: usize,
}

impl Default for DimDefaults {
    fn default() -> Self {
        DimDefaults {
            batch: 1,
            other: 64,
        }
    }
}

/// The range random values are drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ValueRange {
    /// Uniform in `[lo, hi)`.
    Float {
        lo: f64,
        hi: f64,
    },
    /// Uniform integers in `[lo, hi)`.
    Int {
        lo: i64,
        hi: i64,
    },
    Bool,
    Text,
    /// An attention mask: ones along the last axis, the first row whole, later rows with
    /// trailing or leading padding (zeros) or none, as a caller's batch of unequal sequences.
    Mask,
    /// Position ids: `0, 1, 2, ...` along the last axis, at most `hi - 1` (the rows of the
    /// table they index).
    Positions {
        hi: i64,
    },
}

/// How one input is generated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InputPlan {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub range: ValueRange,
}

/// Checks that `rewritten` can take the inputs of `original`: every input it needs exists
/// in the original with the same dtype and no conflicting fixed dimension.
pub fn check_compatible(
    original: &ModelInfo,
    rewritten: &ModelInfo,
    warnings: &mut Vec<String>,
) -> Result<(), VerifyError> {
    for r in &rewritten.inputs {
        let Some(o) = original.input(&r.name) else {
            return Err(VerifyError::input(
                &rewritten.path,
                &r.name,
                format!(
                    "needs an input that {} does not have",
                    original.path.display()
                ),
            ));
        };
        if let (Some(od), Some(rd)) = (o.dtype(), r.dtype()) {
            if od != rd {
                return Err(VerifyError::input(
                    &rewritten.path,
                    &r.name,
                    format!(
                        "is {} but {} in {}",
                        rd.name(),
                        od.name(),
                        original.path.display()
                    ),
                ));
            }
        }
        if let (Some(od), Some(rd)) = (o.dims(), r.dims()) {
            let conflict = od.len() != rd.len()
                || od
                    .iter()
                    .zip(rd)
                    .any(|p| matches!(p, (Dim::Fixed(a), Dim::Fixed(b)) if a != b));
            if conflict {
                return Err(VerifyError::input(
                    &rewritten.path,
                    &r.name,
                    format!(
                        "has shape {} but {} in {}",
                        r.describe(),
                        o.describe(),
                        original.path.display()
                    ),
                ));
            }
        }
    }
    for o in &original.inputs {
        if rewritten.input(&o.name).is_none() {
            warnings.push(format!(
                "{} does not use input '{}' of {}",
                rewritten.path.display(),
                o.name,
                original.path.display()
            ));
        }
    }
    Ok(())
}

/// Decides dtype, shape and value range of every input of `original`. Symbolic dims take
/// `--dim` values, else a fixed size the rewritten model declares at the same place, else
/// the defaults; one name always gets one value.
pub fn plan_inputs(
    original: &ModelInfo,
    rewritten: &ModelInfo,
    dims: &DimOverrides,
    defaults: DimDefaults,
    float_range: (f64, f64),
    warnings: &mut Vec<String>,
) -> Result<Vec<InputPlan>, VerifyError> {
    let mut params: HashMap<String, usize> = dims.by_name.clone().into_iter().collect();
    let mut used_names = std::collections::HashSet::new();
    let mut plans = Vec::with_capacity(original.inputs.len());
    for spec in &original.inputs {
        let dtype = spec_dtype(&original.path, spec)?;
        let declared = spec.dims().ok_or_else(|| {
            VerifyError::input(
                &original.path,
                &spec.name,
                "has no declared shape; give real inputs with --inputs",
            )
        })?;
        let hint = rewritten.input(&spec.name).and_then(ValueSpec::dims);
        let mut shape = Vec::with_capacity(declared.len());
        for (axis, d) in declared.iter().enumerate() {
            let fixed_hint = hint.and_then(|h| match h.get(axis) {
                Some(Dim::Fixed(v)) => Some(*v),
                _ => None,
            });
            let by_axis = dims.by_axis.get(&(spec.name.clone(), axis)).copied();
            let default = if axis == 0 {
                defaults.batch
            } else {
                defaults.other
            };
            let v = match d {
                Dim::Fixed(v) => *v,
                Dim::Param(p) => {
                    let _ = used_names.insert(p.clone());
                    // An axis override is the most specific; otherwise one name, one value.
                    match (by_axis, params.get(p)) {
                        (Some(v), _) => {
                            let _ = params.entry(p.clone()).or_insert(v);
                            v
                        }
                        (None, Some(v)) => *v,
                        (None, None) => {
                            let v = fixed_hint.unwrap_or(default);
                            let _ = params.insert(p.clone(), v);
                            v
                        }
                    }
                }
                Dim::Unknown => by_axis.or(fixed_hint).unwrap_or(default),
            };
            shape.push(v);
        }
        match element_count(&shape) {
            Some(n) if n <= MAX_INPUT_ELEMENTS => {}
            _ => {
                return Err(VerifyError::input(
                    &original.path,
                    &spec.name,
                    format!(
                        "shape {} is too large to generate (limit {MAX_INPUT_ELEMENTS} elements); choose smaller sizes with --dim",
                        fmt_shape(&shape)
                    ),
                ))
            }
        }
        plans.push(InputPlan {
            name: spec.name.clone(),
            dtype,
            shape,
            range: ValueRange::Bool,
        });
    }
    for name in dims.by_name.keys() {
        if !used_names.contains(name) {
            let mut known: Vec<String> = used_names.iter().cloned().collect();
            known.sort();
            warnings.push(crate::analysis::unknown_dim_warning(
                name,
                &original.path,
                &known,
            ));
        }
    }
    for (input, axis) in dims.by_axis.keys() {
        let ok = plans
            .iter()
            .any(|p| &p.name == input && *axis < p.shape.len());
        if !ok {
            warnings.push(format!(
                "--dim {input}[{axis}]: {} has no such input axis",
                original.path.display()
            ));
        }
    }
    // Value ranges, now that every shape is known.
    let shapes: HashMap<String, Vec<usize>> = plans
        .iter()
        .map(|p| (p.name.clone(), p.shape.clone()))
        .collect();
    for plan in &mut plans {
        let role = original
            .roles
            .get(&plan.name)
            .or_else(|| rewritten.roles.get(&plan.name));
        let int_hi = int_bound(original, rewritten, &plan.name, &shapes);
        plan.range = match plan.dtype.kind() {
            crate::runtime::run::dtype::Kind::Int | crate::runtime::run::dtype::Kind::Bool
                if role == Some(&InputRole::Mask) && int_hi.is_none_or(|hi| hi >= 2) =>
            {
                ValueRange::Mask
            }
            crate::runtime::run::dtype::Kind::Int if role == Some(&InputRole::Positions) => {
                ValueRange::Positions {
                    hi: int_hi.unwrap_or(i64::MAX),
                }
            }
            crate::runtime::run::dtype::Kind::Float
                if original.scale_inputs.contains(&plan.name)
                    || rewritten.scale_inputs.contains(&plan.name) =>
            {
                ValueRange::Float {
                    lo: SCALE_RANGE.0,
                    hi: SCALE_RANGE.1,
                }
            }
            crate::runtime::run::dtype::Kind::Float => ValueRange::Float {
                lo: float_range.0,
                hi: float_range.1,
            },
            crate::runtime::run::dtype::Kind::Bool => ValueRange::Bool,
            crate::runtime::run::dtype::Kind::Str => ValueRange::Text,
            crate::runtime::run::dtype::Kind::Int => ValueRange::Int {
                lo: 0,
                hi: int_hi.unwrap_or(GENERIC_INT_RANGE),
            },
            crate::runtime::run::dtype::Kind::Opaque => {
                return Err(VerifyError::input(
                    &original.path,
                    &plan.name,
                    format!(
                        "random {} values are not supported; give real inputs with --inputs",
                        plan.dtype.name()
                    ),
                ))
            }
        };
        let cap = match plan.dtype {
            DType::I8 => 1 << 7,
            DType::U8 => 1 << 8,
            DType::I16 => 1 << 15,
            DType::U16 => 1 << 16,
            DType::I32 => 1 << 31,
            _ => i64::MAX,
        };
        match &mut plan.range {
            ValueRange::Int { hi, .. } | ValueRange::Positions { hi } => *hi = (*hi).min(cap),
            _ => {}
        }
    }
    Ok(plans)
}

/// The bound of an integer input that reaches index positions: the smallest size it indexes
/// (at least 1); None when it reaches none.
fn int_bound(
    original: &ModelInfo,
    rewritten: &ModelInfo,
    name: &str,
    shapes: &HashMap<String, Vec<usize>>,
) -> Option<i64> {
    let bounds: Vec<&IndexBound> = original
        .index_bounds
        .get(name)
        .into_iter()
        .chain(rewritten.index_bounds.get(name))
        .flatten()
        .collect();
    if bounds.is_empty() {
        return None;
    }
    let hi = bounds
        .iter()
        .map(|b| match b {
            IndexBound::Known(n) => *n as i64,
            IndexBound::InputAxis { input, axis } => shapes
                .get(input)
                .and_then(|s| s.get(*axis))
                .map_or(SMALL_INDEX_RANGE, |&n| n as i64),
            IndexBound::Unknown => SMALL_INDEX_RANGE,
        })
        .min()
        .unwrap_or(SMALL_INDEX_RANGE)
        .max(1);
    Some(hi)
}

fn spec_dtype(path: &Path, spec: &ValueSpec) -> Result<DType, VerifyError> {
    match &spec.kind {
        crate::runtime::run::model::ValueKind::Tensor { dtype: Some(d), .. } => Ok(*d),
        crate::runtime::run::model::ValueKind::Tensor { elem_code, .. } => Err(VerifyError::input(
            path,
            &spec.name,
            format!(
                "has unsupported element type {}",
                DType::describe_code(*elem_code)
            ),
        )),
        crate::runtime::run::model::ValueKind::Other(what) => Err(VerifyError::input(
            path,
            &spec.name,
            format!(
                "is {what}; only tensor inputs can be generated, give real inputs with --inputs"
            ),
        )),
    }
}

/// Generates the inputs of a plan from one seed.
pub fn generate(plans: &[InputPlan], seed: u64) -> Vec<(String, HostTensor)> {
    let mut rng = Prng::new(seed);
    plans
        .iter()
        .map(|p| (p.name.clone(), generate_one(p, &mut rng)))
        .collect()
}

fn generate_one(p: &InputPlan, rng: &mut Prng) -> HostTensor {
    let n = element_count(&p.shape).unwrap_or(0);
    let data = match p.range {
        ValueRange::Text => TensorData::Strings(
            (0..n)
                .map(|_| {
                    let len = rng.range_i64(1, 9);
                    (0..len)
                        .map(|_| (b'a' + rng.range_i64(0, 26) as u8) as char)
                        .collect()
                })
                .collect(),
        ),
        ValueRange::Bool => TensorData::Bytes((0..n).map(|_| (rng.next_u64() & 1) as u8).collect()),
        ValueRange::Float { lo, hi } => {
            let lanes = p.dtype.lanes();
            let mut out = Vec::with_capacity(p.dtype.byte_len(n).unwrap_or(0));
            for _ in 0..n * lanes {
                let v = lo + (hi - lo) * rng.next_f64();
                match p.dtype {
                    DType::F64 | DType::C128 => out.extend_from_slice(&v.to_le_bytes()),
                    DType::F16 => out.extend_from_slice(&f32_to_f16(v as f32).to_le_bytes()),
                    DType::BF16 => out.extend_from_slice(&f32_to_bf16(v as f32).to_le_bytes()),
                    _ => out.extend_from_slice(&(v as f32).to_le_bytes()),
                }
            }
            TensorData::Bytes(out)
        }
        ValueRange::Mask => {
            let len = p.shape.last().copied().unwrap_or(1).max(1);
            let size = p.dtype.scalar_size().unwrap_or(1);
            let mut out = Vec::with_capacity(n * size);
            for row in 0..n.div_ceil(len) {
                // Row 0 whole; later rows: none, trailing or leading padding, 1 to len/2.
                let (kind, pad) = if row == 0 || len < 2 {
                    (0, 0)
                } else {
                    let kind = rng.range_i64(0, 3);
                    let pad = rng.range_i64(1, (len / 2).max(1) as i64 + 1) as usize;
                    (kind, pad.min(len - 1))
                };
                for j in 0..len.min(n - row * len) {
                    let padded = match kind {
                        1 => j >= len - pad,
                        2 => j < pad,
                        _ => false,
                    };
                    let v = i64::from(!padded);
                    out.extend_from_slice(&v.to_le_bytes()[..size]);
                }
            }
            TensorData::Bytes(out)
        }
        ValueRange::Positions { hi } => {
            let len = p.shape.last().copied().unwrap_or(1).max(1);
            let size = p.dtype.scalar_size().unwrap_or(8);
            let mut out = Vec::with_capacity(n * size);
            for i in 0..n {
                let v = ((i % len) as i64).min(hi.max(1) - 1);
                out.extend_from_slice(&v.to_le_bytes()[..size]);
            }
            TensorData::Bytes(out)
        }
        ValueRange::Int { lo, hi } => {
            let size = p.dtype.scalar_size().unwrap_or(8);
            let mut out = Vec::with_capacity(n * size);
            for _ in 0..n {
                let v = rng.range_i64(lo, hi);
                out.extend_from_slice(&v.to_le_bytes()[..size]);
            }
            TensorData::Bytes(out)
        }
    };
    HostTensor {
        dtype: p.dtype,
        shape: p.shape.clone(),
        data,
    }
}

/// Whether a tensor set holds model inputs or expected outputs (picks `input_*.pb` or
/// `output_*.pb` in a folder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetKind {
    Inputs,
    Outputs,
}

/// Reads tensors from an `.npz`, `.npy` or `.pb` file, or a folder of `input_N.pb` /
/// `output_N.pb` (or `.npy`) files. Names are `None` where the file gives none usable
/// (`arr_0` of `numpy.savez`, an empty TensorProto name).
pub fn load_tensor_set(
    path: &Path,
    kind: SetKind,
) -> Result<Vec<(Option<String>, HostTensor)>, VerifyError> {
    let err = |m: String| VerifyError::data(path, m);
    if path.is_dir() {
        let prefix = match kind {
            SetKind::Inputs => "input_",
            SetKind::Outputs => "output_",
        };
        let entries =
            std::fs::read_dir(path).map_err(|e| err(format!("cannot list folder: {e}")))?;
        let mut pbs: Vec<(u64, std::path::PathBuf)> = Vec::new();
        let mut npys: Vec<std::path::PathBuf> = Vec::new();
        for e in entries.flatten() {
            let p = e.path();
            let Some(name) = p.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
                continue;
            };
            if let Some(idx) = name
                .strip_prefix(prefix)
                .and_then(|r| r.strip_suffix(".pb"))
                .and_then(|n| n.parse::<u64>().ok())
            {
                pbs.push((idx, p));
            } else if name.ends_with(".npy") {
                npys.push(p);
            }
        }
        pbs.sort();
        npys.sort();
        let mut out = Vec::new();
        if !pbs.is_empty() {
            for (_, p) in pbs {
                let (name, t) = pb::read_tensor_pb(&p).map_err(|m| VerifyError::data(&p, m))?;
                out.push(((!name.is_empty()).then_some(name), t));
            }
        } else {
            for p in npys {
                let t = npz::read_npy(&p).map_err(|m| VerifyError::data(&p, m))?;
                let stem = p.file_stem().and_then(|s| s.to_str()).map(str::to_string);
                out.push((stem, t));
            }
        }
        if out.is_empty() {
            return Err(err(format!("folder has no {prefix}N.pb or .npy files")));
        }
        return Ok(out);
    }
    if !path.exists() {
        return Err(err("does not exist".into()));
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    match ext.as_str() {
        "npz" => {
            let arrays = npz::read_npz(path).map_err(err)?;
            Ok(arrays
                .into_iter()
                .map(|(k, t)| {
                    let positional = k
                        .strip_prefix("arr_")
                        .is_some_and(|n| n.parse::<u64>().is_ok());
                    ((!positional).then_some(k), t)
                })
                .collect())
        }
        "npy" => Ok(vec![(None, npz::read_npy(path).map_err(err)?)]),
        "pb" => {
            let (name, t) = pb::read_tensor_pb(path).map_err(err)?;
            Ok(vec![((!name.is_empty()).then_some(name), t)])
        }
        _ => Err(err(
            "expected an .npz, .npy or .pb file or a folder of input_N.pb files".into(),
        )),
    }
}

/// Matches loaded tensors to `names`: by name where the tensor's name is one of them, the
/// others by position. Every name must get exactly one tensor; tensors that match no name
/// are an error.
pub fn assign_tensors(
    path: &Path,
    tensors: Vec<(Option<String>, HostTensor)>,
    names: &[String],
    what: &str,
) -> Result<Vec<(String, HostTensor)>, VerifyError> {
    let mut slots: Vec<Option<HostTensor>> = vec![None; names.len()];
    let mut leftovers = Vec::new();
    for (pos, (name, t)) in tensors.into_iter().enumerate() {
        match name
            .as_ref()
            .and_then(|n| names.iter().position(|x| x == n))
        {
            Some(i) => {
                if slots[i].is_some() {
                    return Err(VerifyError::data(
                        path,
                        format!("two tensors for {what} '{}'", names[i]),
                    ));
                }
                slots[i] = Some(t);
            }
            None => leftovers.push((pos, name, t)),
        }
    }
    for (pos, name, t) in leftovers {
        if pos < names.len() && slots[pos].is_none() {
            slots[pos] = Some(t);
        } else {
            let label = name.unwrap_or_else(|| format!("#{pos}"));
            return Err(VerifyError::data(
                path,
                format!(
                    "tensor '{label}' matches no {what} (the model has {what}s {})",
                    names.join(", ")
                ),
            ));
        }
    }
    names
        .iter()
        .zip(slots)
        .map(|(n, s)| {
            s.map(|t| (n.clone(), t))
                .ok_or_else(|| VerifyError::data(path, format!("no tensor for {what} '{n}'")))
        })
        .collect()
}

/// Checks a loaded input against the model's declaration (dtype, rank, fixed dims).
pub fn check_input(
    model: &Path,
    spec: &ValueSpec,
    t: &HostTensor,
    source: &Path,
) -> Result<(), VerifyError> {
    if let Some(d) = spec.dtype() {
        if d != t.dtype {
            return Err(VerifyError::input(
                model,
                &spec.name,
                format!(
                    "is {} but {} gives {}",
                    spec.describe(),
                    source.display(),
                    t.describe()
                ),
            ));
        }
    }
    if let Some(dims) = spec.dims() {
        let fits = dims.len() == t.shape.len()
            && dims
                .iter()
                .zip(&t.shape)
                .all(|(d, &s)| !matches!(d, Dim::Fixed(v) if *v != s));
        if !fits {
            return Err(VerifyError::input(
                model,
                &spec.name,
                format!(
                    "is {} but {} gives {}",
                    spec.describe(),
                    source.display(),
                    t.describe()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prng_is_deterministic_and_spread() {
        let a: Vec<u64> = {
            let mut r = Prng::new(7);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = Prng::new(7);
            (0..4).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(run_seed(0, 0), run_seed(0, 1));
        let mut r = Prng::new(1);
        for _ in 0..1000 {
            let f = r.next_f64();
            assert!((0.0..1.0).contains(&f));
            let i = r.range_i64(-3, 5);
            assert!((-3..5).contains(&i));
        }
    }

    #[test]
    fn masks_are_ones_with_padding_and_positions_count_up() {
        let mask = InputPlan {
            name: "attention_mask".into(),
            dtype: DType::I64,
            shape: vec![6, 9],
            range: ValueRange::Mask,
        };
        let t = generate_one(&mask, &mut Prng::new(3));
        let TensorData::Bytes(b) = &t.data else {
            panic!("bytes")
        };
        let v: Vec<i64> = b
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert!(v.iter().all(|&x| x == 0 || x == 1), "{v:?}");
        assert!(
            v[..9].iter().all(|&x| x == 1),
            "the first row is whole: {v:?}"
        );
        assert!(v.chunks(9).all(|row| row.contains(&1)), "{v:?}");
        assert!(v.contains(&0), "some row is padded: {v:?}");
        let pos = InputPlan {
            name: "position_ids".into(),
            dtype: DType::I32,
            shape: vec![2, 5],
            range: ValueRange::Positions { hi: 4 },
        };
        let t = generate_one(&pos, &mut Prng::new(3));
        let TensorData::Bytes(b) = &t.data else {
            panic!("bytes")
        };
        let v: Vec<i32> = b
            .chunks(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(v, [0, 1, 2, 3, 3, 0, 1, 2, 3, 3]);
    }

    #[test]
    fn dim_overrides_parse() {
        let d =
            DimOverrides::parse(&["batch=2".into(), "x[3]=320".into(), "a=b=4".into()]).unwrap();
        assert_eq!(d.by_name.get("batch"), Some(&2));
        assert_eq!(d.by_name.get("a=b"), Some(&4));
        assert_eq!(d.by_axis.get(&("x".to_string(), 3)), Some(&320));
        assert!(DimOverrides::parse(&["nope".into()]).is_err());
        assert!(DimOverrides::parse(&["n=-1".into()]).is_err());
    }
}
