//! The `verify` command line: arguments (to be flattened into the main CLI as
//! `onnx-safeify verify ...`) and the function that runs them.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::compare::Tolerance;
use super::inputs::{DimDefaults, DimOverrides};
use super::{verify_models, VerifyOptions, EXIT_ERROR, EXIT_MISMATCH, EXIT_PASS};
use crate::runtime::run::discover::Discovery;
use crate::runtime::run::external::{RuntimeKind, WebgpuPins};
use crate::runtime::run::ort::{OptLevel, SessionSettings};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}

/// Run an original model on ONNX Runtime (CPU) and its rewrite on the chosen runtime (by
/// default ONNX Runtime CPU too) and compare all outputs.
///
/// Outputs are judged by the exactness class the rewritten model records (metadata
/// onnx_safeify.exactness, written by the compile): exact: bit-identical (NaN equal to NaN);
/// rounding: within 1e-5 of the output's scale (its largest |reference|) for float32, 2 ulp
/// at that scale for float16/bfloat16; approximate:B[@F]: within B of the scale (at least F). Integer, bool
/// and string outputs must be equal. With no class recorded, or with --atol/--rtol given:
/// |a-b| <= atol + rtol*|b|.
///
/// Exit code 0: every output within its bound; 1: some output differs, has another
/// shape or dtype, or is missing; 2: verification could not be run.
#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// The original model (.onnx), or a partition manifest / folder holding one.
    pub original: PathBuf,
    /// The rewritten model (.onnx), or a partition manifest (.yaml) / folder holding one.
    pub rewritten: PathBuf,
    /// Real inputs: an .npz, .npy or .pb file, or a folder of input_0.pb, input_1.pb, ...
    /// (matched to graph inputs by name, else by position). Default: random inputs.
    #[arg(long, value_name = "FILE.npz|DIR")]
    pub inputs: Option<PathBuf>,
    /// Reference outputs for the rewritten model: an .npz or a folder of output_0.pb, ...
    #[arg(long, value_name = "DIR|FILE.npz")]
    pub expected: Option<PathBuf>,
    /// Size of a symbolic dimension (NAME=VALUE) or of one input axis (INPUT[AXIS]=VALUE).
    /// Unnamed sizes default to 1 for axis 0 and 64 otherwise.
    // The text is also the --help text, where `INPUT[AXIS]` must read as written.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// Relative tolerance: judge by |a-b| <= atol + rtol*|b| instead of the rewrite's
    /// exactness class [default when no class is recorded: 1e-4].
    #[arg(long)]
    pub rtol: Option<f64>,
    /// Absolute tolerance: judge by |a-b| <= atol + rtol*|b| instead of the rewrite's
    /// exactness class [default when no class is recorded: 1e-5].
    #[arg(long)]
    pub atol: Option<f64>,
    /// Number of runs, each with fresh random inputs.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Base seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Report format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
    /// ONNX Runtime library to load (default: $ORT_DYLIB_PATH, else the onnxruntime
    /// Python package of the wheel's own interpreter ($ONNX_SAFEIFY_PYTHON), $VIRTUAL_ENV,
    /// $ONNX_SAFEIFY_VENV (else $ONNX_SAFEIFY_CACHE/venv) or python3 on PATH).
    #[arg(long, value_name = "PATH")]
    pub ort_library: Option<PathBuf>,
    /// ONNX Runtime graph optimisation level for both models [default: disable when judging
    /// by the rewrite's exactness class (the level the classes are defined at), else all].
    #[arg(long, value_enum)]
    pub ort_opt_level: Option<OptLevel>,
    /// Range of random float inputs, LO:HI (uniform in [LO, HI)).
    #[arg(long, value_name = "LO:HI", default_value = "-1:1")]
    pub float_range: String,
    /// Where the rewritten model runs: cpu (ONNX Runtime CPU, in process), webgpu
    /// (onnxruntime-web's WebGPU provider in headless Chromium), openvino (OpenVINO's CPU
    /// plugin, f32) or ort-ep:NAME (ONNX Runtime execution provider NAME through the venv's
    /// onnxruntime package, e.g. ort-ep:CUDAExecutionProvider, in a child process). The
    /// original always runs on ONNX Runtime CPU; on another runtime it runs there too when
    /// it can, and the rewrite is judged against it there, within the larger of its bound and
    /// twice the runtime's own difference from ONNX Runtime CPU (reported); when it cannot,
    /// the rewritten model runs on ONNX Runtime CPU too, the rewrite is judged there and the
    /// runtime's own difference is measured on the rewritten model. webgpu and openvino need
    /// scripts/setup-runtimes.sh.
    #[arg(long, value_name = "RUNTIME", value_parser = RuntimeKind::parse, default_value = "cpu")]
    pub runtime: RuntimeKind,
    /// With --runtime webgpu: how the CPU pins (node metadata layer_ann) reach onnxruntime-web:
    /// the session config session.layer_assignment_settings, or the WebGPU provider's
    /// forceCpuNodeNames option listing the annotated nodes.
    #[arg(long, value_enum, default_value_t = WebgpuPins::LayerAssignment)]
    pub webgpu_pins: WebgpuPins,
    /// Seconds a webgpu / openvino / ort-ep run of one model may take (all runs together) before it
    /// is stopped.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub timeout: u64,
}

impl VerifyArgs {
    /// The library options these arguments stand for.
    pub fn to_options(&self) -> Result<VerifyOptions, String> {
        let dims = DimOverrides::parse(&self.dims)?;
        let (lo, hi) = self
            .float_range
            .split_once(':')
            .and_then(|(a, b)| Some((a.trim().parse::<f64>().ok()?, b.trim().parse::<f64>().ok()?)))
            .ok_or_else(|| format!("--float-range '{}': expected LO:HI", self.float_range))?;
        let mut discovery = Discovery::from_env();
        if let Some(p) = &self.ort_library {
            discovery.explicit = Some(p.clone());
        }
        Ok(VerifyOptions {
            tolerance: Tolerance {
                rtol: self.rtol.unwrap_or(Tolerance::default().rtol),
                atol: self.atol.unwrap_or(Tolerance::default().atol),
            },
            tolerance_given: self.rtol.is_some() || self.atol.is_some(),
            runs: self.runs,
            seed: self.seed,
            dims,
            dim_defaults: DimDefaults::default(),
            float_range: (lo, hi),
            inputs: self.inputs.clone(),
            feed: None,
            expected: self.expected.clone(),
            discovery: Some(discovery),
            session: SessionSettings {
                optimization: self.ort_opt_level.unwrap_or(OptLevel::All),
                threads: None,
            },
            class_optimization: match self.ort_opt_level {
                Some(_) => None,
                None => Some(OptLevel::Disable),
            },
            runtime: self.runtime.clone(),
            webgpu_pins: self.webgpu_pins,
            runtime_timeout: std::time::Duration::from_secs(self.timeout),
        })
    }
}

/// Parses `verify` arguments (without the program and subcommand names), for tests and
/// embedding: `parse_args(["a.onnx", "b.onnx", "--runs", "3"])`.
pub fn parse_args<I, T>(args: I) -> Result<VerifyArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    #[derive(clap::Parser)]
    #[command(name = "verify")]
    struct Wrapper {
        #[command(flatten)]
        args: VerifyArgs,
    }
    let argv =
        std::iter::once(std::ffi::OsString::from("verify")).chain(args.into_iter().map(Into::into));
    <Wrapper as clap::Parser>::try_parse_from(argv).map(|w| w.args)
}

/// Runs `verify`, prints the report (stdout) or the error (stderr, one line), and returns
/// the exit code: 0 pass, 1 mismatch, 2 error.
pub fn run_cli(args: &VerifyArgs) -> u8 {
    let opts = match args.to_options() {
        Ok(o) => o,
        Err(e) => {
            crate::errln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    // Nothing from a file should panic; if something still does (inside ONNX Runtime's
    // wrapper, say), report it as an error instead of aborting with a backtrace.
    match super::genai::both_folders(&args.original, &args.rewritten) {
        Ok(true) => return run_genai(args, &opts),
        Ok(false) => {}
        Err(e) => {
            crate::errln!("error: {e}");
            return EXIT_ERROR;
        }
    }
    let result = std::panic::catch_unwind(|| verify_models(&args.original, &args.rewritten, &opts));
    match result {
        Ok(Ok(report)) => print_report(
            args.format,
            || report.to_text(),
            || report.to_json(),
            report.passed(),
        ),
        Ok(Err(e)) => {
            crate::errln!("error: {e}");
            EXIT_ERROR
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            crate::errln!(
                "error: internal failure while verifying {} against {}: {}",
                args.original.display(),
                args.rewritten.display(),
                crate::runtime::run::error::one_line(&msg)
            );
            EXIT_ERROR
        }
    }
}

/// Prints a report in `format` (text as is, JSON with a newline) and returns its exit code.
fn print_report(
    format: OutputFormat,
    text: impl FnOnce() -> String,
    json: impl FnOnce() -> String,
    passed: bool,
) -> u8 {
    match format {
        OutputFormat::Text => crate::outp!("{}", text()),
        OutputFormat::Json => crate::outln!("{}", json()),
    }
    if passed {
        EXIT_PASS
    } else {
        EXIT_MISMATCH
    }
}

/// `verify DIR DIR` on two onnxruntime-genai folders: a prefill and a decode step.
fn run_genai(args: &VerifyArgs, opts: &VerifyOptions) -> u8 {
    let result = std::panic::catch_unwind(|| {
        super::genai::verify_genai(&args.original, &args.rewritten, opts)
    });
    match result {
        Ok(Ok(report)) => print_report(
            args.format,
            || report.to_text(),
            || report.to_json(),
            report.passed(),
        ),
        Ok(Err(e)) => {
            crate::errln!("error: {e}");
            EXIT_ERROR
        }
        Err(_) => {
            crate::errln!(
                "error: internal failure while verifying the genai folder {} against {}",
                args.original.display(),
                args.rewritten.display()
            );
            EXIT_ERROR
        }
    }
}
