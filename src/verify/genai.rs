//! `verify` of two onnxruntime-genai folders (issue 34): every model the original folder's
//! `genai_config.json` names is verified against the file of the same name in the rewritten
//! folder. The decoder, whose past key/value inputs the config names, runs the way generation
//! runs it: one prefill step (a prompt of [`PROMPT`] tokens, empty past) and one decode step
//! (one token, the past the original produced in the prefill). Both models get the same inputs
//! at each step, so each step is judged on its own at the rewrite's class. Other models
//! (encoders, vision, embedding) get random inputs, as a single file would.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::inputs::Prng;
use super::report::VerifyReport;
use super::{verify_models, GivenFeed, VerifyOptions};
use crate::genai;
use crate::runtime::run::dtype::DType;
use crate::runtime::run::error::VerifyError;
use crate::runtime::run::model::{load_model_info, Dim, ModelInfo};
use crate::runtime::run::ort::{self, ModelSession, SessionSettings};
use crate::runtime::run::tensor::{HostTensor, TensorData};

/// Tokens in the prefill step's prompt.
pub const PROMPT: usize = 6;

/// One verification inside a folder: a model and the step it ran.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    /// The model's file name, as the config names it.
    pub model: String,
    /// `prefill`, `decode`, or `random inputs` for a model without past state.
    pub step: String,
    pub report: VerifyReport,
}

#[derive(Debug, Clone, Serialize)]
pub struct GenaiReport {
    pub original: String,
    pub rewritten: String,
    pub steps: Vec<StepReport>,
    pub passed: bool,
}

impl GenaiReport {
    pub fn passed(&self) -> bool {
        !self.steps.is_empty() && self.steps.iter().all(|s| s.report.passed())
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "genai folder: {}", self.original);
        let _ = writeln!(s, "rewritten:    {}", self.rewritten);
        for st in &self.steps {
            let _ = writeln!(s, "\n== {} ({})", st.model, st.step);
            s.push_str(&st.report.to_text());
        }
        let verdict = if self.passed() { "PASS" } else { "FAIL" };
        let failed: Vec<String> = self
            .steps
            .iter()
            .filter(|st| !st.report.passed())
            .map(|st| format!("{} {}", st.model, st.step))
            .collect();
        let _ = write!(s, "\ngenai folder: {verdict} ({} steps", self.steps.len());
        if !failed.is_empty() {
            let _ = write!(s, "; failed: {}", failed.join(", "));
        }
        let _ = writeln!(s, ")");
        s
    }
}

/// Are both paths genai folders? (One of them alone is a usage error, reported by the caller.)
pub fn both_folders(original: &Path, rewritten: &Path) -> Result<bool, VerifyError> {
    match (
        genai::is_genai_folder(original),
        genai::is_genai_folder(rewritten),
    ) {
        (true, true) => Ok(true),
        (false, false) => Ok(false),
        (o, _) => {
            let (folder, other) = if o {
                (original, rewritten)
            } else {
                (rewritten, original)
            };
            Err(VerifyError::Usage(format!(
                "{} is an onnxruntime-genai folder but {} is not; give two folders (the original and the one `onnx-safeify DIR --target T` wrote) or two model files",
                folder.display(),
                other.display()
            )))
        }
    }
}

/// What the config says about the decoder's state.
struct Decoder {
    input_ids: String,
    attention_mask: Option<String>,
    position_ids: Option<String>,
    /// (past input name, present output name) per layer, keys then values.
    state: Vec<(String, String)>,
    vocab: i64,
}

fn usage(dir: &Path, msg: String) -> VerifyError {
    VerifyError::Usage(format!("{}: {msg}", dir.join(genai::CONFIG).display()))
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// The decoder section (`model.decoder`) when its file is `file` and it names past inputs.
fn decoder_of(dir: &Path, config: &Value, file: &str) -> Result<Option<Decoder>, VerifyError> {
    let Some(dec) = config.get("model").and_then(|m| m.get("decoder")) else {
        return Ok(None);
    };
    if dec.get("filename").and_then(Value::as_str) != Some(file) {
        return Ok(None);
    }
    let (Some(pk), Some(pv)) = (
        str_at(dec, &["inputs", "past_key_names"]),
        str_at(dec, &["inputs", "past_value_names"]),
    ) else {
        return Ok(None);
    };
    let (Some(ok), Some(ov)) = (
        str_at(dec, &["outputs", "present_key_names"]),
        str_at(dec, &["outputs", "present_value_names"]),
    ) else {
        return Err(usage(
            dir,
            "`model.decoder.inputs` names past keys/values but `model.decoder.outputs` has no present_key_names/present_value_names".into(),
        ));
    };
    for p in [pk, pv, ok, ov] {
        if p.matches("%d").count() != 1 {
            return Err(usage(
                dir,
                format!("the state name pattern {p:?} must hold exactly one %d"),
            ));
        }
    }
    let layers = dec
        .get("num_hidden_layers")
        .and_then(Value::as_u64)
        .filter(|&n| (1..=4096).contains(&n))
        .ok_or_else(|| {
            usage(
                dir,
                "`model.decoder.num_hidden_layers` is missing or not a layer count".into(),
            )
        })?;
    let mut state = Vec::new();
    for i in 0..layers {
        let i = i.to_string();
        state.push((pk.replace("%d", &i), ok.replace("%d", &i)));
        state.push((pv.replace("%d", &i), ov.replace("%d", &i)));
    }
    let vocab = config
        .get("model")
        .and_then(|m| m.get("vocab_size"))
        .and_then(Value::as_i64)
        .filter(|&v| v > 0)
        .ok_or_else(|| usage(dir, "`model.vocab_size` is missing or not positive".into()))?;
    Ok(Some(Decoder {
        input_ids: str_at(dec, &["inputs", "input_ids"])
            .unwrap_or("input_ids")
            .to_string(),
        attention_mask: str_at(dec, &["inputs", "attention_mask"]).map(str::to_string),
        position_ids: str_at(dec, &["inputs", "position_ids"]).map(str::to_string),
        state,
        vocab,
    }))
}

fn int_tensor(dtype: DType, shape: Vec<usize>, values: &[i64]) -> Result<HostTensor, String> {
    let bytes: Vec<u8> = match dtype {
        DType::I64 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::I32 => values
            .iter()
            .flat_map(|&v| i32::try_from(v).unwrap_or(i32::MAX).to_le_bytes())
            .collect(),
        other => return Err(format!("an integer input of type {}", other.name())),
    };
    HostTensor::new(dtype, shape, TensorData::Bytes(bytes))
}

/// The inputs of one step: `tokens` new tokens after `past` cached ones; the cache from
/// `cache` (the original's presents) or empty.
fn step_feed(
    info: &ModelInfo,
    dec: &Decoder,
    tokens: &[i64],
    past: usize,
    cache: Option<&[(String, HostTensor)]>,
) -> Result<Vec<(String, HostTensor)>, VerifyError> {
    let bad = |name: &str, m: String| VerifyError::input(&info.path, name, m);
    let n = tokens.len();
    let mut feed = Vec::new();
    for spec in &info.inputs {
        let name = spec.name.as_str();
        let dtype = spec
            .dtype()
            .ok_or_else(|| bad(name, "not a tensor of a known type".into()))?;
        let t = if name == dec.input_ids {
            int_tensor(dtype, vec![1, n], tokens)
        } else if dec.attention_mask.as_deref() == Some(name) {
            int_tensor(dtype, vec![1, past + n], &vec![1; past + n])
        } else if dec.position_ids.as_deref() == Some(name) {
            let pos: Vec<i64> = (past..past + n).map(|p| p as i64).collect();
            int_tensor(dtype, vec![1, n], &pos)
        } else if let Some((_, present)) = dec.state.iter().find(|(p, _)| p == name) {
            match cache {
                Some(c) => {
                    let (_, t) = c.iter().find(|(k, _)| k == present).ok_or_else(|| {
                        bad(
                            name,
                            format!("the original's prefill gave no output '{present}'"),
                        )
                    })?;
                    Ok(t.clone())
                }
                None => {
                    // [batch, kv heads, 0, head size]: the declared dims, sequence emptied.
                    let dims = spec
                        .dims()
                        .filter(|d| d.len() == 4)
                        .ok_or_else(|| bad(name, "past state of rank other than 4".into()))?;
                    let fixed = |d: &Dim| match d {
                        Dim::Fixed(v) => Some(*v),
                        _ => None,
                    };
                    let (Some(heads), Some(size)) = (fixed(&dims[1]), fixed(&dims[3])) else {
                        return Err(bad(
                            name,
                            "past state whose head count or head size is not fixed".into(),
                        ));
                    };
                    let shape = vec![1, heads, 0, size];
                    HostTensor::new(dtype, shape, TensorData::Bytes(Vec::new()))
                }
            }
        } else {
            return Err(bad(
                name,
                "an input the genai config does not describe (input_ids, attention_mask, position_ids, past keys/values); verify this model file on its own with --inputs".into(),
            ));
        };
        feed.push((name.to_string(), t.map_err(|m| bad(name, m))?));
    }
    Ok(feed)
}

fn describe(step: &str, feed: &[(String, HostTensor)]) -> String {
    let parts: Vec<String> = feed
        .iter()
        .filter(|(k, _)| !k.contains("past"))
        .map(|(k, t)| format!("{k} {}", t.describe()))
        .collect();
    let past = feed.iter().filter(|(k, _)| k.contains("past")).count();
    format!(
        "{step} step: {}{}",
        parts.join(", "),
        if past > 0 {
            format!(", {past} past tensors")
        } else {
            String::new()
        }
    )
}

/// Verifies the rewritten folder against the original one.
pub fn verify_genai(
    original: &Path,
    rewritten: &Path,
    opts: &VerifyOptions,
) -> Result<GenaiReport, VerifyError> {
    if opts.inputs.is_some() || opts.expected.is_some() {
        return Err(VerifyError::Usage(
            "--inputs/--expected name one model's tensors; with genai folders verify makes each step's inputs itself (verify one model file to use yours)".into(),
        ));
    }
    let to_usage = |e: crate::error::Error| VerifyError::Usage(e.to_string());
    let orig = genai::read(original).map_err(to_usage)?;
    let rewr = genai::read(rewritten).map_err(to_usage)?;
    let mut steps = Vec::new();
    for file in &orig.models {
        if !rewr.models.contains(file) {
            return Err(usage(
                rewritten,
                format!(
                    "names no model {file}, which {} names",
                    original.join(genai::CONFIG).display()
                ),
            ));
        }
        let (o, r): (PathBuf, PathBuf) = (original.join(file), rewritten.join(file));
        let Some(dec) = decoder_of(original, &orig.config, file)? else {
            steps.push(StepReport {
                model: file.clone(),
                step: "random inputs".into(),
                report: verify_models(&o, &r, opts)?,
            });
            continue;
        };
        let info = load_model_info(&o)?;
        let mut rng = Prng::new(opts.seed ^ 0x6765_6e61_6900);
        let mut token = || rng.range_i64(0, dec.vocab);
        let prompt: Vec<i64> = (0..PROMPT).map(|_| token()).collect();
        let next = [token()];
        let prefill = step_feed(&info, &dec, &prompt, 0, None)?;
        // The original's prefill state, for the decode step of both models.
        let discovery = opts
            .discovery
            .clone()
            .unwrap_or_else(crate::runtime::run::discover::Discovery::from_env);
        let rt = ort::runtime(&discovery)?;
        let settings = SessionSettings {
            optimization: opts.class_optimization.unwrap_or(opts.session.optimization),
            ..opts.session.clone()
        };
        let (mut session, _) = ModelSession::open(rt, &info, &settings)?;
        let state = session.run(|n| prefill.iter().find(|(k, _)| k == n).map(|(_, t)| t))?;
        drop(session);
        let decode = step_feed(&info, &dec, &next, PROMPT, Some(&state))?;
        for (step, feed) in [("prefill", prefill), ("decode", decode)] {
            let mut o2 = opts.clone();
            o2.runs = 1;
            o2.feed = Some(GivenFeed {
                description: describe(step, &feed),
                tensors: feed,
            });
            steps.push(StepReport {
                model: file.clone(),
                step: step.into(),
                report: verify_models(&o, &r, &o2)?,
            });
        }
    }
    let mut report = GenaiReport {
        original: original.display().to_string(),
        rewritten: rewritten.display().to_string(),
        steps,
        passed: false,
    };
    report.passed = report.passed();
    Ok(report)
}
