//! `verify`: runs an original model and its rewrite on ONNX Runtime's CPU provider with
//! the same inputs and compares every output by name.
//!
//! Running a model belongs to [`crate::runtime::run`] (finding and loading ONNX Runtime, the
//! other runtimes, host tensors, what a model's inputs and outputs are); `verify` is its user.
//! Its own pieces, in the order data flows through them:
//! - [`manifest`] reads a chain of partitioned segments;
//! - [`inputs`] makes random inputs or reads real ones (`.npz` through
//!   [`crate::runtime::run::npz`], [`pb`]);
//! - [`compare`] compares outputs ([`pair`]: a model on a runtime against ONNX Runtime CPU,
//!   for `probe` and `bisect`); [`report`] holds the result; [`cli`] is the command;
//!   [`genai`] verifies an onnxruntime-genai model folder.

pub mod cli;
pub mod compare;
pub mod genai;
pub mod inputs;
pub mod manifest;
pub mod pair;
pub mod pb;
pub mod report;
pub mod wide;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::runtime::run::discover::Discovery;
pub use crate::runtime::run::error::VerifyError;
pub use crate::runtime::run::external::{RuntimeKind, WebgpuPins};
pub use crate::runtime::run::ort::{OptLevel, SessionSettings};
pub use cli::{run_cli, VerifyArgs};
pub use compare::{Criterion, Judge, OutputComparison, Status, Tolerance};
pub use inputs::{DimDefaults, DimOverrides};
pub use report::VerifyReport;

use crate::rewrite::exactness::Exactness;
use crate::runtime::run::model::{self, ModelInfo};
use crate::runtime::run::ort::{self, ModelSession, Runtime};
use crate::runtime::run::tensor::HostTensor;
use crate::runtime::run::{error, external};
use inputs::SetKind;
use manifest::Pipeline;
use report::{ExactnessInfo, InputSource, OriginalOnRuntime, RunReport, RuntimeInfo, SessionInfo};

/// Exit code: every output within tolerance.
pub const EXIT_PASS: u8 = 0;
/// Exit code: some output differs (values, shape, dtype, or missing).
pub const EXIT_MISMATCH: u8 = 1;
/// Exit code: verification could not be carried out (bad file, no runtime, ...).
pub const EXIT_ERROR: u8 = 2;

/// How to verify.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The tolerance used when `tolerance_given`, or when the rewritten model records no
    /// exactness class (a model from an older version, or two arbitrary models).
    pub tolerance: Tolerance,
    /// True: judge by `tolerance` whatever class the rewritten model records (`--atol`/`--rtol`
    /// given). False (the default): by the class the rewritten model records under
    /// `onnx_safeify.exactness`: bit-identical for `exact`, the class's bound at each output's
    /// scale otherwise.
    pub tolerance_given: bool,
    /// Number of runs with fresh random inputs (ignored with `inputs`).
    pub runs: usize,
    /// Base seed; run `i` uses `inputs::run_seed(seed, i)`.
    pub seed: u64,
    pub dims: DimOverrides,
    pub dim_defaults: DimDefaults,
    /// Random float inputs are uniform in `[lo, hi)`.
    pub float_range: (f64, f64),
    /// Real inputs: `.npz`, `.npy`, `.pb`, or a folder of `input_N.pb`.
    pub inputs: Option<PathBuf>,
    /// Inputs made in memory by the caller, with what they are (used instead of `inputs`).
    pub feed: Option<GivenFeed>,
    /// Reference outputs for the rewritten model: `.npz` or a folder of `output_N.pb`.
    pub expected: Option<PathBuf>,
    /// Where to find ONNX Runtime; `None`: from the environment ([`Discovery::from_env`]).
    pub discovery: Option<Discovery>,
    pub session: SessionSettings,
    /// When the outputs are judged by an exactness class: the ONNX Runtime CPU sessions use
    /// this graph optimisation level instead of `session.optimization` (default: disabled,
    /// the level the classes are defined at: ONNX Runtime's fusions differ between a graph
    /// and its rewrite, which changes the float arithmetic). `None`: `session.optimization`
    /// always (`--ort-opt-level` given).
    pub class_optimization: Option<OptLevel>,
    /// Where the rewritten model runs. The original always runs on ONNX Runtime's CPU
    /// provider; on another runtime it runs there too when it can, and the rewrite is judged
    /// against it there (within the larger of the criterion and the runtime's own difference
    /// from ONNX Runtime CPU).
    pub runtime: RuntimeKind,
    /// How `--runtime webgpu` passes the `layer_ann` pins to onnxruntime-web.
    pub webgpu_pins: WebgpuPins,
    /// Bound on a `webgpu` / `openvino` helper process (all runs of one model together).
    pub runtime_timeout: Duration,
}

/// Default bound on a `webgpu` / `openvino` helper process.
pub const DEFAULT_RUNTIME_TIMEOUT: Duration = Duration::from_secs(300);

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            tolerance: Tolerance::default(),
            tolerance_given: false,
            runs: 1,
            seed: 0,
            dims: DimOverrides::default(),
            dim_defaults: DimDefaults::default(),
            float_range: (-1.0, 1.0),
            inputs: None,
            feed: None,
            expected: None,
            discovery: None,
            session: SessionSettings::default(),
            class_optimization: Some(OptLevel::Disable),
            runtime: RuntimeKind::Cpu,
            webgpu_pins: WebgpuPins::LayerAssignment,
            runtime_timeout: DEFAULT_RUNTIME_TIMEOUT,
        }
    }
}

/// The inputs of one run, by name.
type Feed = Vec<(String, HostTensor)>;

/// Inputs given in memory ([`VerifyOptions::feed`]).
#[derive(Debug, Clone)]
pub struct GivenFeed {
    /// What they are, for the report (`prefill: input_ids [1, 6], ...`).
    pub description: String,
    pub tensors: Feed,
}

/// A model to run: one file, or a chain of segments from a partition manifest.
enum Target {
    Single(ModelInfo),
    Chain(Pipeline),
}

impl Target {
    fn load(path: &Path) -> Result<Target, VerifyError> {
        match manifest::manifest_path(path)? {
            Some(m) => Ok(Target::Chain(manifest::load_pipeline(&m)?)),
            None => Ok(Target::Single(model::load_model_info(path)?)),
        }
    }

    fn info(&self) -> &ModelInfo {
        match self {
            Target::Single(i) => i,
            Target::Chain(p) => &p.info,
        }
    }
}

/// Open sessions for a target.
enum Runner {
    Single(ModelSession),
    Chain(Vec<(ModelSession, Vec<String>)>),
}

impl Runner {
    fn open(
        rt: &Runtime,
        target: &Target,
        role: &str,
        settings: &SessionSettings,
        sessions: &mut Vec<SessionInfo>,
        warnings: &mut Vec<String>,
    ) -> Result<Runner, VerifyError> {
        match target {
            Target::Single(info) => {
                let (s, w) = ModelSession::open(rt, info, settings)?;
                warnings.extend(w);
                sessions.push(SessionInfo {
                    role: role.into(),
                    model: info.path.display().to_string(),
                    segment: None,
                    device: None,
                    layer_assignment: s.layer_assignment.clone(),
                });
                Ok(Runner::Single(s))
            }
            Target::Chain(p) => {
                let mut chain = Vec::with_capacity(p.segments.len());
                for (i, seg) in p.segments.iter().enumerate() {
                    let (s, w) = ModelSession::open(rt, &seg.info, settings)?;
                    warnings.extend(w);
                    sessions.push(SessionInfo {
                        role: role.into(),
                        model: seg.info.path.display().to_string(),
                        segment: Some(i),
                        device: seg.device.map(|d| format!("{d:?}").to_lowercase()),
                        layer_assignment: s.layer_assignment.clone(),
                    });
                    chain.push((s, seg.outputs.clone()));
                }
                Ok(Runner::Chain(chain))
            }
        }
    }

    /// Runs on `inputs`; returns every named value produced (for a chain: all segment
    /// outputs, so final outputs are found whichever segment made them).
    fn run(
        &mut self,
        inputs: &[(String, HostTensor)],
    ) -> Result<HashMap<String, HostTensor>, VerifyError> {
        let mut pool: HashMap<String, HostTensor> = HashMap::new();
        match self {
            Runner::Single(s) => {
                let lookup = |n: &str| inputs.iter().find(|(k, _)| k == n).map(|(_, t)| t);
                for (name, t) in s.run(lookup)? {
                    let _ = pool.insert(name, t);
                }
            }
            Runner::Chain(chain) => {
                for (s, keep) in chain.iter_mut() {
                    let produced = {
                        let lookup = |n: &str| {
                            pool.get(n)
                                .or_else(|| inputs.iter().find(|(k, _)| k == n).map(|(_, t)| t))
                        };
                        s.run(lookup)?
                    };
                    for (name, t) in produced {
                        if keep.contains(&name) {
                            let _ = pool.insert(name, t);
                        }
                    }
                }
            }
        }
        Ok(pool)
    }
}

/// Runs `original` and `rewritten` (each an `.onnx` file, a partition manifest, or a
/// folder holding one) on the same inputs and compares all outputs of the original by
/// name. `Ok` carries the comparison whether or not it passed; `Err` means it could not
/// be carried out.
pub fn verify_models(
    original: &Path,
    rewritten: &Path,
    opts: &VerifyOptions,
) -> Result<VerifyReport, VerifyError> {
    if opts.runs == 0 {
        return Err(VerifyError::Usage("--runs must be at least 1".into()));
    }
    let (lo, hi) = opts.float_range;
    if !(lo.is_finite() && hi.is_finite() && lo < hi) {
        return Err(VerifyError::Usage(format!(
            "float range [{lo}, {hi}) is empty or not finite"
        )));
    }
    let t = opts.tolerance;
    if !(t.rtol >= 0.0 && t.atol >= 0.0) {
        return Err(VerifyError::Usage(
            "--rtol and --atol must be non-negative numbers".into(),
        ));
    }
    let orig = Target::load(original)?;
    let rewr = Target::load(rewritten)?;
    let external = opts.runtime != RuntimeKind::Cpu;
    if external && matches!(rewr, Target::Chain(_)) {
        return Err(VerifyError::Usage(format!(
            "--runtime {}: {} is a partition manifest; give one .onnx file (each segment can be verified on its own)",
            opts.runtime.name(),
            rewritten.display()
        )));
    }
    if opts.runtime_timeout.is_zero() {
        return Err(VerifyError::Usage(
            "--timeout must be at least 1 second".into(),
        ));
    }
    let mut warnings = Vec::new();
    inputs::check_compatible(orig.info(), rewr.info(), &mut warnings)?;
    let (judge, mut exactness) = choose_criterion(rewr.info(), opts, &mut warnings);
    let session = match (judge.criterion, opts.class_optimization) {
        (Criterion::Class(_), Some(level)) => SessionSettings {
            optimization: level,
            ..opts.session.clone()
        },
        _ => opts.session.clone(),
    };
    exactness.ort_opt_level = session.optimization;
    if session.optimization != opts.session.optimization {
        exactness.note.push_str(&format!(
            "; ONNX Runtime CPU graph optimisations {} (the level the class is defined at; --ort-opt-level to choose)",
            opt_name(session.optimization)
        ));
    }

    // Inputs: read them (once) or plan random ones, before loading the runtime so that
    // file errors come first.
    let fixed_inputs = match (&opts.feed, &opts.inputs) {
        (Some(given), _) => {
            for (name, t) in &given.tensors {
                if let Some(spec) = orig.info().input(name) {
                    inputs::check_input(&orig.info().path, spec, t, &orig.info().path)?;
                }
            }
            Some(given.tensors.clone())
        }
        (None, Some(p)) => {
            let tensors = inputs::load_tensor_set(p, SetKind::Inputs)?;
            let names: Vec<String> = orig.info().inputs.iter().map(|v| v.name.clone()).collect();
            let assigned = inputs::assign_tensors(p, tensors, &names, "input")?;
            for (name, t) in &assigned {
                if let Some(spec) = orig.info().input(name) {
                    inputs::check_input(&orig.info().path, spec, t, p)?;
                }
            }
            if opts.runs > 1 {
                warnings.push(format!(
                    "--runs {} ignored: inputs come from {}",
                    opts.runs,
                    p.display()
                ));
            }
            Some(assigned)
        }
        (None, None) => None,
    };
    let plan = match fixed_inputs {
        Some(_) => Vec::new(),
        None => inputs::plan_inputs(
            orig.info(),
            rewr.info(),
            &opts.dims,
            opts.dim_defaults,
            opts.float_range,
            &mut warnings,
        )?,
    };
    let expected = match &opts.expected {
        Some(p) => {
            let tensors = inputs::load_tensor_set(p, SetKind::Outputs)?;
            let names: Vec<String> = orig.info().outputs.iter().map(|v| v.name.clone()).collect();
            Some(inputs::assign_tensors(p, tensors, &names, "output")?)
        }
        None => None,
    };

    let discovery = opts.discovery.clone().unwrap_or_else(Discovery::from_env);
    let rt = ort::runtime(&discovery)?;
    let mut sessions = Vec::new();
    // On another runtime, an original that ONNX Runtime CPU cannot load (a contrib op with
    // no CPU kernel, e.g. BiasAdd) can still be the reference: its run on that runtime.
    let (mut orig_runner, orig_cpu_error) = match Runner::open(
        rt,
        &orig,
        "original",
        &session,
        &mut sessions,
        &mut warnings,
    ) {
        Ok(r) => (Some(r), None),
        Err(VerifyError::Session { path, message })
            if external && matches!(orig, Target::Single(_)) =>
        {
            (None, Some((path, message)))
        }
        Err(e) => return Err(e),
    };
    let mut rewr_runner = if external {
        None
    } else {
        Some(Runner::open(
            rt,
            &rewr,
            "rewritten",
            &session,
            &mut sessions,
            &mut warnings,
        )?)
    };

    for o in &rewr.info().outputs {
        if orig.info().output(&o.name).is_none() {
            warnings.push(format!(
                "{} has output '{}' that {} does not have; it is not compared",
                rewr.info().path.display(),
                o.name,
                orig.info().path.display()
            ));
        }
    }

    let runs = if fixed_inputs.is_some() { 1 } else { opts.runs };
    let all_feeds: Vec<(Feed, Option<u64>)> = (0..runs)
        .map(|run| match &fixed_inputs {
            Some(f) => (f.clone(), None),
            None => {
                let seed = inputs::run_seed(opts.seed, run);
                (inputs::generate(&plan, seed), Some(seed))
            }
        })
        .collect();
    // The rewritten model on another runtime: every run in one helper process.
    let feeds: Vec<Feed> = if external {
        all_feeds.iter().map(|(f, _)| f.clone()).collect()
    } else {
        Vec::new()
    };
    // The level the reference runs at, for an ONNX Runtime provider (the same arithmetic the
    // class is defined at); the level asked for on the other runtimes.
    let external_opt = match opts.runtime {
        RuntimeKind::OrtEp(_) => session.optimization,
        _ => opts.session.optimization,
    };
    let mut external_run = if external {
        let ext = match external::run_external(
            &opts.runtime,
            rewr.info(),
            &feeds,
            external_opt,
            opts.webgpu_pins,
            opts.runtime_timeout,
            &mut warnings,
        ) {
            Ok(ext) => ext,
            Err(e @ (VerifyError::RuntimeNotFound(_) | VerifyError::RuntimeLoad { .. })) => {
                return Err(e)
            }
            // The rewritten model does not load or run there: say whose limit that is by
            // trying the original there too.
            Err(e) => {
                return Err(blame_runtime_failure(
                    e,
                    &orig,
                    &opts.runtime,
                    &feeds,
                    external_opt,
                    opts,
                ))
            }
        };
        sessions.push(SessionInfo {
            role: "rewritten".into(),
            model: rewr.info().path.display().to_string(),
            segment: None,
            device: Some(opts.runtime.name().to_string()),
            layer_assignment: ext
                .info
                .settings
                .iter()
                .find(|(k, _)| k == ort::LAYER_ASSIGNMENT_KEY)
                .map(|(_, v)| v.clone()),
        });
        Some(ext)
    } else {
        None
    };
    // The original on that runtime too (three runs), when it loads there.
    let mut original_on_runtime: Option<OriginalOnRuntime> = None;
    let mut original_external: Option<Vec<HashMap<String, HostTensor>>> = None;
    if external {
        let mut o = OriginalOnRuntime {
            runtime: opts.runtime.clone(),
            ran: false,
            error: None,
            differs: false,
            differences: Vec::new(),
            measured_on: None,
            reference: None,
        };
        match &orig {
            Target::Chain(_) => {
                o.error = Some(format!(
                    "{} is a partition manifest; only one .onnx file runs on {}",
                    original.display(),
                    opts.runtime.name()
                ))
            }
            Target::Single(info) => match external::run_external(
                &opts.runtime,
                info,
                &feeds,
                external_opt,
                opts.webgpu_pins,
                opts.runtime_timeout,
                &mut warnings,
            ) {
                Ok(ext) => {
                    sessions.push(SessionInfo {
                        role: "original".into(),
                        model: info.path.display().to_string(),
                        segment: None,
                        device: Some(opts.runtime.name().to_string()),
                        layer_assignment: None,
                    });
                    o.ran = true;
                    original_external = Some(ext.outputs);
                }
                Err(e) => o.error = Some(error::one_line(&e.to_string())),
            },
        }
        if o.ran {
            o.measured_on = Some("original");
        }
        if let Some((path, message)) = &orig_cpu_error {
            if !o.ran {
                // Neither ONNX Runtime CPU nor the runtime runs the original: nothing to
                // compare against.
                return Err(VerifyError::Session {
                    path: path.clone(),
                    message: format!(
                        "{message}; nor does {}: {}",
                        opts.runtime.name(),
                        o.error.as_deref().unwrap_or("no reason given")
                    ),
                });
            }
            o.measured_on = None;
            o.reference = Some(error::one_line(
                &VerifyError::Session {
                    path: path.clone(),
                    message: message.clone(),
                }
                .to_string(),
            ));
        }
        original_on_runtime = Some(o);
    }
    // When the original does not run there, the rewritten model runs on ONNX Runtime CPU too:
    // the rewrite is judged there (against the original, at its class), and the runtime's own
    // difference is measured on the rewritten model (on the runtime against ONNX Runtime CPU).
    let mut rewr_on_cpu_runner = match original_on_runtime.as_mut() {
        Some(o) if !o.ran => {
            match Runner::open(
                rt,
                &rewr,
                "rewritten",
                &session,
                &mut sessions,
                &mut warnings,
            ) {
                Ok(r) => {
                    o.measured_on = Some("rewritten");
                    Some(r)
                }
                Err(e) => {
                    warnings.push(format!(
                        "the rewritten model does not load on ONNX Runtime CPU either ({}): judged on {} against the original on ONNX Runtime CPU",
                        error::one_line(&e.to_string()),
                        opts.runtime.name()
                    ));
                    None
                }
            }
        }
        _ => None,
    };
    let mut reports = Vec::with_capacity(runs);
    let mut weak: Vec<String> = Vec::new();
    let mut wide_session: Option<Result<(ModelSession, Vec<String>), String>> = None;
    for (run, (feed, seed)) in all_feeds.into_iter().enumerate() {
        let hint = |e: VerifyError| {
            match (e, seed) {
            (VerifyError::Run { path, message }, Some(seed)) => VerifyError::Run {
                path,
                message: format!(
                    "{message} (on random inputs, seed {seed:#x}: if an input is a shape, size or index the graph does not show, give real inputs with --inputs or sizes with --dim)"
                ),
            },
            (e, _) => e,
        }
        };
        let cpu_reference = match orig_runner.as_mut() {
            Some(r) => Some(r.run(&feed).map_err(hint)?),
            None => None,
        };
        let actual = match (&mut rewr_runner, &mut external_run) {
            (Some(r), _) => r.run(&feed).map_err(hint)?,
            (None, Some(ext)) => std::mem::take(&mut ext.outputs[run]),
            (None, None) => unreachable!("one of the two runs the rewritten model"),
        };
        let rewritten_on_cpu = match rewr_on_cpu_runner.as_mut() {
            Some(r) => Some(r.run(&feed).map_err(hint)?),
            None => None,
        };
        let mut on_runtime: Option<HashMap<String, HostTensor>> = original_external
            .as_mut()
            .and_then(|o| o.get_mut(run))
            .map(std::mem::take);
        // Without ONNX Runtime CPU's run, the original on the runtime is the reference (its
        // own difference from ONNX Runtime CPU is then unknown).
        let reference = match (cpu_reference, on_runtime.take()) {
            (Some(r), o) => {
                on_runtime = o;
                r
            }
            (None, Some(r)) => r,
            (None, None) => {
                return Err(VerifyError::Run {
                    path: original.to_path_buf(),
                    message: format!(
                        "ONNX Runtime CPU cannot run it and {} gave no outputs for run {}",
                        opts.runtime.name(),
                        run + 1
                    ),
                })
            }
        };
        let rt_name = opts.runtime.name();
        // On another runtime whose own difference cannot be measured (the original does not
        // run there), a class bound (defined on ONNX Runtime CPU) is held to at least the
        // tolerance.
        let class_judge = judge;
        let judge = match (&on_runtime, external) {
            (None, true) => judge.with_floor(opts.tolerance),
            _ => judge,
        };
        let mut outputs = Vec::with_capacity(orig.info().outputs.len());
        let mut against_cpu = Vec::new();
        let mut runtime_vs_cpu = Vec::new();
        // Per output: the runtime's own largest difference from ONNX Runtime CPU.
        let mut allowances: HashMap<&str, f64> = HashMap::new();
        for spec in &orig.info().outputs {
            let Some(b) = reference.get(&spec.name) else {
                return Err(VerifyError::output(
                    &orig.info().path,
                    &spec.name,
                    "declared but not produced by ONNX Runtime",
                ));
            };
            if let Some(why) = compare::weak_reference(b, weak_tolerance(judge)) {
                let w = format!(
                    "output '{}' of {} {why} on the inputs of run {}: the comparison proves little; give real inputs with --inputs",
                    spec.name,
                    orig.info().path.display(),
                    run + 1
                );
                if !weak.contains(&spec.name) {
                    weak.push(spec.name.clone());
                    warnings.push(w);
                }
            }
            let missing = |reference: &HostTensor| {
                let mut m = OutputComparison::missing(
                    &spec.name,
                    reference,
                    format!("{} has no output of this name", rewr.info().path.display()),
                );
                m.judged_by = judge.criterion.label();
                m
            };
            let r = on_runtime.as_ref().and_then(|o| o.get(&spec.name));
            match (r, &on_runtime) {
                (Some(r), _) => {
                    // Three runs: judged against the original on the same runtime.
                    runtime_vs_cpu.push(compare::compare_with(&spec.name, b, r, judge));
                    // The runtime rounds on both sides of this comparison (the rewritten
                    // model and the original both ran there), so each side may be off by its
                    // own difference: twice the difference measured on the original. A rewrite
                    // that the runtime computes much worse than the original still fails.
                    let allowance = 2.0 * compare::finite_max_abs_diff(b, r).unwrap_or(0.0);
                    let _ = allowances.insert(spec.name.as_str(), allowance);
                    let j = judge.with_allowance(allowance);
                    match actual.get(&spec.name) {
                        Some(a) => {
                            outputs.push(compare::compare_with_second(
                                &spec.name,
                                r,
                                a,
                                j,
                                Some(b),
                            ));
                            against_cpu.push(compare::compare_with(&spec.name, b, a, judge));
                        }
                        None => {
                            outputs.push(missing(r));
                            against_cpu.push(missing(b));
                        }
                    }
                }
                (None, Some(_)) => {
                    // The runtime gave no such output for the original: judged against
                    // ONNX Runtime CPU.
                    let mut c = match actual.get(&spec.name) {
                        Some(a) => compare::compare_with(
                            &spec.name,
                            b,
                            a,
                            judge.with_floor(opts.tolerance),
                        ),
                        None => missing(b),
                    };
                    let note = format!(
                        "judged against ONNX Runtime CPU: {rt_name} gave no output of this name for the original"
                    );
                    c.detail = Some(match c.detail.take() {
                        Some(d) => format!("{d}; {note}"),
                        None => note,
                    });
                    outputs.push(c);
                }
                (None, None) => match rewritten_on_cpu.as_ref().and_then(|m| m.get(&spec.name)) {
                    Some(rc) => {
                        // Judged on ONNX Runtime CPU; the runtime's difference on the same
                        // (rewritten) model shown beside it.
                        outputs.push(compare::compare_with(&spec.name, b, rc, class_judge));
                        match actual.get(&spec.name) {
                            Some(a) => {
                                against_cpu.push(compare::compare_with(&spec.name, b, a, judge));
                                runtime_vs_cpu.push(compare::compare_with(
                                    &spec.name,
                                    rc,
                                    a,
                                    class_judge,
                                ));
                            }
                            None => {
                                against_cpu.push(missing(b));
                                runtime_vs_cpu.push(missing(rc));
                            }
                        }
                    }
                    None => outputs.push(match actual.get(&spec.name) {
                        Some(a) => compare::compare_with(&spec.name, b, a, judge),
                        None => missing(b),
                    }),
                },
            }
        }
        // Elements past a rounding or approximate bound: a float64 evaluation of the original
        // tells an ill-conditioned output from an unfaithful rewrite (verify/wide.rs).
        let loose = matches!(judge.criterion, Criterion::Class(c) if c != Exactness::Exact);
        if !external && loose && outputs.iter().any(|c| c.status == Status::Mismatch) {
            if let Target::Single(info) = &orig {
                let ws = wide_session.get_or_insert_with(|| open_wide(rt, info, &session));
                match ws {
                    Ok((s, in_float)) => {
                        match s.run(|n| feed.iter().find(|(k, _)| k == n).map(|(_, t)| t)) {
                            Ok(wide_out) => {
                                for c in outputs.iter_mut() {
                                    let w = wide_out.iter().find(|(n, _)| *n == c.name);
                                    if let (Some(b), Some(a), Some((_, w))) =
                                        (reference.get(&c.name), actual.get(&c.name), w)
                                    {
                                        let _ = compare::explain_by_float64(c, b, a, w, in_float);
                                    }
                                }
                            }
                            Err(e) => warnings.push(format!(
                                "the float64 evaluation of the original did not run: {}",
                                error::one_line(&e.to_string())
                            )),
                        }
                    }
                    Err(why) => {
                        let w = format!("no float64 evaluation of the original: {why}");
                        if !warnings.contains(&w) {
                            warnings.push(w);
                        }
                    }
                }
            }
        }
        let mut against_expected = Vec::new();
        if let Some(exp) = &expected {
            for (name, b) in exp {
                let j = judge.with_allowance(allowances.get(name.as_str()).copied().unwrap_or(0.0));
                against_expected.push(match actual.get(name) {
                    Some(a) => compare::compare_with(name, b, a, j),
                    None => OutputComparison::missing(
                        name,
                        b,
                        format!("{} has no output of this name", rewr.info().path.display()),
                    ),
                });
            }
        }
        reports.push(RunReport {
            run: run + 1,
            seed,
            outputs,
            expected: against_expected,
            against_cpu,
            runtime_vs_cpu,
        });
    }
    if let Some(o) = original_on_runtime.as_mut() {
        o.summarise(&reports);
    }

    let mut report = VerifyReport {
        original: original.display().to_string(),
        rewritten: rewritten.display().to_string(),
        expected: opts.expected.as_ref().map(|p| p.display().to_string()),
        onnxruntime: RuntimeInfo {
            library: rt.library.display().to_string(),
            version: rt.version(),
            build_info: rt.build_info.clone(),
        },
        tolerance: opts.tolerance,
        exactness,
        rewritten_runtime: external_run.map(|e| e.info),
        original_on_runtime,
        sessions,
        inputs: match (&opts.feed, &opts.inputs) {
            (Some(given), _) => InputSource::Given {
                description: given.description.clone(),
            },
            (None, Some(p)) => InputSource::File {
                path: p.display().to_string(),
            },
            (None, None) => InputSource::Random {
                seed: opts.seed,
                plan,
            },
        },
        runs: reports,
        warnings,
        passed: false,
    };
    report.passed = report.passed();
    Ok(report)
}

/// Opens the float64 evaluation of `info`'s model (`wide.rs`): its ops without a float64 kernel
/// in ONNX Runtime, found one load at a time, run in float32. Returns the session and those ops,
/// or why there is none.
fn open_wide(
    rt: &Runtime,
    info: &ModelInfo,
    settings: &SessionSettings,
) -> Result<(ModelSession, Vec<String>), String> {
    let proto = model::read_model_proto(&info.path).map_err(|e| error::one_line(&e.to_string()))?;
    let mut w = wide::widen(&proto)?;
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("onnx-safeify-wide-{}-{n}.onnx", std::process::id()));
    // Each load names at most one op without a float64 kernel; a model has few kinds of them.
    for _ in 0..64 {
        use prost::Message;
        std::fs::write(&path, w.model.encode_to_vec())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let opened = model::model_info_from_proto(&path, &w.model)
            .and_then(|i| ModelSession::open(rt, &i, settings));
        let _ = std::fs::remove_file(&path);
        match opened {
            Ok((s, _)) => return Ok((s, w.in_float.clone())),
            Err(e) => {
                let msg = e.to_string();
                match w.node_named_in(&msg) {
                    Some(idx) if w.keep_float(idx) => continue,
                    _ => return Err(error::one_line(&msg)),
                }
            }
        }
    }
    Err("too many ops without a float64 kernel".into())
}

/// What judges the outputs: `--atol`/`--rtol` when given, else the exactness class the
/// rewritten model records, else (no class, or one this version cannot read) the default
/// tolerance.
fn choose_criterion(
    rewritten: &ModelInfo,
    opts: &VerifyOptions,
    warnings: &mut Vec<String>,
) -> (Judge, ExactnessInfo) {
    let t = opts.tolerance;
    let tol_text = format!("|a-b| <= {:e} + {:e}*|b| (b: reference)", t.atol, t.rtol);
    let recorded = rewritten.exactness.clone();
    let class = recorded.as_deref().and_then(|raw| {
        let c = Exactness::from_meta(raw);
        if c.is_none() {
            warnings.push(format!(
                "{}: the exactness class recorded ({}='{raw}') is not one this version reads (exact, rounding, approximate:B, approximate:B@F)",
                rewritten.path.display(),
                crate::rewrite::exactness::EXACTNESS_KEY
            ));
        }
        c
    });
    let class_name = class.map(Exactness::to_meta);
    if opts.tolerance_given {
        let note = match &class_name {
            Some(c) => format!("{tol_text}, as given (the rewrite's class, {c}, not used)"),
            None => format!("{tol_text}, as given"),
        };
        return (
            Judge::tolerance(t),
            ExactnessInfo {
                class: class_name,
                criterion: "given".into(),
                note,
                ort_opt_level: opts.session.optimization,
            },
        );
    }
    // The classes are defined on ONNX Runtime's CPU provider. Elsewhere an exact rewrite may
    // change which kernels run (a depthwise convolution split in slices, on OpenVINO's CPU
    // plugin, sums in another order: 1.3e-7 of the scale on an AMD EPYC), so it is held to
    // float rounding there.
    let other_runtime = !matches!(&opts.runtime, RuntimeKind::Cpu)
        && !matches!(&opts.runtime, RuntimeKind::OrtEp(n) if n == "CPUExecutionProvider");
    let class = match class {
        Some(Exactness::Exact) if other_runtime => {
            warnings.push(
                "the rewrite is exact on ONNX Runtime CPU; on this runtime it is held to float rounding (its kernels for the rewritten nodes may sum in another order)".into(),
            );
            Some(Exactness::Rounding)
        }
        c => c,
    };
    match class {
        Some(c) => {
            let rule = match c {
                Exactness::Exact => {
                    "bit-identical (equal values, NaN equal to NaN at the same places)".to_string()
                }
                other => format!(
                    "{}; scale: the reference output's largest magnitude; integer and bool outputs equal",
                    other.bound_text()
                ),
            };
            (
                Judge::class(c),
                ExactnessInfo {
                    class: class_name.clone(),
                    criterion: "class".into(),
                    note: format!(
                        "the rewrite's exactness class, {}: {rule}",
                        class_name.unwrap_or_default()
                    ),
                    ort_opt_level: opts.session.optimization,
                },
            )
        }
        None => (
            Judge::tolerance(t),
            ExactnessInfo {
                class: None,
                criterion: "default".into(),
                note: format!("{tol_text}; no exactness class recorded"),
                ort_opt_level: opts.session.optimization,
            },
        ),
    }
}

/// The tolerance the weak-reference warning measures against: none when the bound scales
/// with the output (a class), so only a constant output or one with no finite value is weak.
fn weak_tolerance(judge: Judge) -> Tolerance {
    match judge.criterion {
        Criterion::Tolerance(t) => t,
        Criterion::Class(_) => Tolerance {
            atol: 0.0,
            rtol: 0.0,
        },
    }
}

fn opt_name(level: OptLevel) -> &'static str {
    match level {
        OptLevel::Disable => "disabled",
        OptLevel::Basic => "basic",
        OptLevel::Extended => "extended",
        OptLevel::All => "all",
    }
}

/// The rewritten model failed to load or run on another runtime (`e`). Runs the original there
/// too and adds to the error whose limit it is: the runtime's own (the original fails there
/// too), or the rewrite's (the original runs).
fn blame_runtime_failure(
    e: VerifyError,
    orig: &Target,
    runtime: &RuntimeKind,
    feeds: &[Feed],
    optimization: OptLevel,
    opts: &VerifyOptions,
) -> VerifyError {
    let Target::Single(info) = orig else {
        return e;
    };
    let rt = runtime.name();
    let mut ignored = Vec::new();
    let verdict = match external::run_external(
        runtime,
        info,
        feeds,
        optimization,
        opts.webgpu_pins,
        opts.runtime_timeout,
        &mut ignored,
    ) {
        Ok(_) => format!("the ORIGINAL RUNS on {rt}: the rewrite is what {rt} cannot load or run"),
        Err(o) => format!(
            "the original fails on {rt} too, so this is {rt}'s own limit, not the rewrite's: {}",
            error::one_line(&o.to_string())
        ),
    };
    match e {
        VerifyError::Model { path, message } => VerifyError::Model {
            path,
            message: format!("{message}; {verdict}"),
        },
        VerifyError::Run { path, message } => VerifyError::Run {
            path,
            message: format!("{message}; {verdict}"),
        },
        other => other,
    }
}
