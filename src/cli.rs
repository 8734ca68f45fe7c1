//! The `onnx-safeify` command line: parses arguments, calls the library, maps results to exit
//! codes (0 ok, 1 findings / denied nodes / not faithful, 2 any error). The binary
//! (`src/main.rs`) and the Python wheel's console script both call [`run`].

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand, ValueEnum};

// The code below names the library by its crate name, as a program using it would.
use crate as onnx_safeify;
use onnx_safeify::engine;
use onnx_safeify::rules::schema::Target;
use onnx_safeify::{Error, ErrorKind};

#[derive(Parser, Debug)]
#[command(
    name = "onnx-safeify",
    version,
    about = "Rewrite ONNX models so they run safely on GPUs and drivers with known hazards",
    long_about = "Rewrite ONNX models so they run safely on GPUs and drivers with known hazards.\n\n\
                  Exit codes: 0 success; 1 findings (check), a denied node or an action that cannot be \
                  applied and no fallback takes it (compile: nothing is written unless --allow-unsafe; \
                  with --strict, also any node that fell back), or an unfaithful rewrite \
                  (verify, --verify); 2 any error.",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    compile: CompileArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Report what the target's rules would change (exit 0: nothing, 1: findings, 2: error).
    Check(CheckArgs),
    /// Say what each rule would do, or for one node why each rule does or does not match.
    Explain(ExplainArgs),
    /// List the built-in targets.
    Targets,
    /// Show what a model contains: IR version, opsets, inputs/outputs, op histogram, weights.
    Inspect {
        /// The model file.
        model: PathBuf,
        /// Print the full IR as text instead of a summary.
        #[arg(long)]
        ir: bool,
        /// Summary format (json: for scripts; not with --ir).
        #[arg(long, value_enum, default_value_t = Format::Text, conflicts_with = "ir")]
        format: Format,
        /// Predict where the target's runtime runs each node (its provider's kernels by op,
        /// since-version and type; ONNX Runtime's CPU preference; the pins).
        #[arg(long, value_name = "NAME|FILE.yaml", conflicts_with = "ir")]
        target: Option<String>,
        /// Size for a symbolic dimension (as for a compile), for the element types and sizes.
        #[arg(long = "dim", value_name = "NAME=VALUE")]
        dims: Vec<String>,
        /// With --target: the graph optimisation level of the runtime's session (ONNX
        /// Runtime's transformations at that level are applied before the placement).
        #[arg(
            long,
            value_name = "disabled|basic|extended|all",
            default_value = "all",
            requires = "target"
        )]
        opt: String,
    },
    /// Prove that a rewritten model computes the same function as the original (ONNX Runtime, CPU).
    Verify(onnx_safeify::verify::VerifyArgs),
    /// Read an error log, name the likely cause with its evidence and the target that fixes it.
    Doctor(DoctorArgs),
    /// Find the nodes that make a model fail on a runtime, and the rules that pin them (checked).
    Bisect(onnx_safeify::bisect::BisectArgs),
    /// Run a suite of small models on a runtime, compare with ONNX Runtime CPU, and write a target with a rule per failure.
    Probe(onnx_safeify::probe::ProbeArgs),
    /// Install what a runtime needs into the cache folder: `setup webgpu` writes the web
    /// harness into $ONNX_SAFEIFY_CACHE/webgpu (default ~/.cache/onnx-safeify/webgpu; or
    /// $ONNX_SAFEIFY_WEBGPU_HARNESS) and installs its npm packages there (npm ci).
    Setup {
        /// What to set up.
        #[arg(value_enum)]
        what: SetupWhat,
    },
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish) to stdout.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) to stdout: `onnx-safeify man | man -l -`.
    Man {
        /// A subcommand's page instead of the main one (`check`, `verify`...).
        subcommand: Option<String>,
    },
}

/// What `setup` installs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum SetupWhat {
    /// The web harness of `--runtime webgpu` (onnxruntime-web and playwright-core, with npm).
    Webgpu,
}

#[derive(Args, Debug, Clone)]
struct TargetArgs {
    /// The target: a built-in name (see `targets`) or a rules file (FILE.yaml).
    #[arg(long, short = 't')]
    target: Option<String>,
    /// Extra rules layered on top of the target (repeatable).
    #[arg(long = "rules", value_name = "FILE.yaml")]
    rules: Vec<PathBuf>,
    /// Size of a symbolic dim, for shape inference and work estimates (repeatable).
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    dims: Vec<String>,
    /// A sample input (arrays named as the model's inputs, as `verify --inputs` reads): its
    /// arrays' shapes give the sizes of the inputs' dims (`--dim` wins over it).
    #[arg(long = "inputs", value_name = "FILE.npz")]
    inputs: Option<PathBuf>,
    /// The NCHWc block size of the CPU that saved the model (8 with AVX2, 16 with AVX-512);
    /// without it, it is read from the model's shapes, or, when several sizes fit, each is tried
    /// on this machine's ONNX Runtime CPU and the one that reproduces the model's outputs is
    /// kept; if none does (or ONNX Runtime is absent) the region falls back.
    #[arg(long = "nchwc-block", value_name = "N", value_parser = clap::value_parser!(i64).range(1..=1024))]
    nchwc_block: Option<i64>,
    /// Let approximate rewrites run (each is listed with its bound in the summary and the
    /// report); without it, a node whose only rewrite is approximate falls back (to the CPU).
    #[arg(long)]
    allow_approximate: bool,
    /// Keep the model's default-domain opset: without it, a model below opset 21 whose
    /// MatMulNBits the target decomposes is raised to 21 where that keeps every node's meaning,
    /// so the weights stay packed (the runtime must then support opset 21: ONNX Runtime 1.18+).
    #[arg(long)]
    keep_opset: bool,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum WeightsArg {
    Share,
    Link,
    Copy,
}

impl From<WeightsArg> for onnx_safeify::io::save::Weights {
    fn from(w: WeightsArg) -> Self {
        use onnx_safeify::io::save::Weights;
        match w {
            WeightsArg::Share => Weights::Share,
            WeightsArg::Link => Weights::Link,
            WeightsArg::Copy => Weights::Copy,
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum CpuMode {
    /// One model; pinned nodes carry metadata `layer_ann`.
    Annotate,
    /// Segment models plus a manifest (for runtimes without per-node placement).
    Partition,
}

#[derive(Args, Debug, Clone)]
struct CompileArgs {
    /// The model to rewrite.
    model: Option<PathBuf>,
    #[command(flatten)]
    target: TargetArgs,
    /// Where to write the result (default: MODEL's stem + `.TARGET.onnx` beside it).
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    /// A genai folder's compile of one model writes into a temporary folder that is renamed
    /// into place at the end: (that folder, its final path), for the paths the messages show.
    #[arg(skip)]
    staged: Option<(PathBuf, PathBuf)>,
    /// Write even when rules deny nodes or an action cannot be applied.
    #[arg(long)]
    allow_unsafe: bool,
    /// Any node that falls back to the CPU blocks the output (exit 1), as a denied one does.
    #[arg(long)]
    strict: bool,
    /// How CPU-pinned nodes are written (default: annotate; the target's `cpu_subgraphs:`
    /// where it says `partition` and the compile pins nodes).
    #[arg(long, value_enum)]
    cpu_subgraphs: Option<CpuMode>,
    /// External data the output keeps unchanged: `share` refers to the input's data files in
    /// the same folder (nothing written) and clones (reflink) or copies them into another
    /// folder; `link` hard-links them there instead (no byte written; an in-place edit of one
    /// file changes the other, and Python's onnx.load refuses a data file with several links);
    /// `copy` writes one fresh OUT.data.
    #[arg(long, value_enum, default_value_t = WeightsArg::Share)]
    weights: WeightsArg,
    /// Let the rewrites add weights beyond the input's size (a decomposition that unpacks
    /// quantized weights): without it, a compile that would add more than 64 MiB of weights
    /// and more than the input holds (model file and external data) writes nothing and exits
    /// 1; with a FACTOR, the output may hold up to FACTOR times the input.
    #[arg(long, value_name = "FACTOR", num_args = 0..=1, default_missing_value = "inf")]
    allow_growth: Option<f64>,
    /// Write a JSON report of the compile.
    #[arg(long, value_name = "FILE.json")]
    report: Option<PathBuf>,
    /// Verify the output against the input on ONNX Runtime (CPU) right after compiling; when
    /// it is not faithful, remove the output and exit 1.
    #[arg(long)]
    verify: bool,
    /// Write Graphviz pictures of the main graph before and after the rewrite into DIR
    /// (`before.dot`, `after.dot`); nodes made or pinned by rules are coloured.
    #[arg(long, value_name = "DIR")]
    dot: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// The model to check.
    model: PathBuf,
    #[command(flatten)]
    target: TargetArgs,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// The model.
    model: PathBuf,
    #[command(flatten)]
    target: TargetArgs,
    /// Explain every rule for this node (its name; inside a body, its scope path such as
    /// `loop/body/conv_3`).
    #[arg(long)]
    node: Option<String>,
}

#[derive(Args, Debug)]
struct DoctorArgs {
    /// The error log (a file, or `-` for standard input).
    log: PathBuf,
    /// The model that failed, to list the nodes involved.
    model: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Set by [`run_then_exit`]: the process ends when the command returns, so a compile need not
/// free the model it loaded.
static PROCESS_ENDS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Called when a compile starts on a large input (see [`on_large_input`]).
static LARGE_INPUT: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Have `hook` called when a compile starts on an input of
/// [`onnx_safeify::io::early::PREPARE_MIN`] bytes or more, before the model is read (the
/// `onnx-safeify` binary tunes its allocator there). Only the first hook given is kept.
pub fn on_large_input(hook: fn()) {
    let _ = LARGE_INPUT.set(hook);
}

/// [`run`] for a process that exits with the returned code right after (the `onnx-safeify`
/// binary): the loaded model is left to the process's end instead of being freed piece by
/// piece. A caller that goes on (the Python module's `run_cli`) uses [`run`].
pub fn run_then_exit<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    PROCESS_ENDS.store(true, std::sync::atomic::Ordering::Relaxed);
    run(args)
}

/// Run the command line on `args` (the program name first, as `std::env::args_os` gives it)
/// and return the exit code. Output goes to this process's stdout and stderr.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args.len() <= 1 {
        // A bare invocation: what can be run, on stderr, and the usage-error code.
        use clap::CommandFactory;
        crate::errp!("{}", Cli::command().render_help());
        return 2;
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and exit 0; usage errors exit 2.
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let result = match cli.command {
        Some(Command::Check(a)) => check(&a),
        Some(Command::Explain(a)) => explain(&a),
        Some(Command::Targets) => targets(),
        Some(Command::Inspect {
            model,
            format,
            target: Some(t),
            dims,
            opt,
            ..
        }) => inspect_placement(&model, &t, &dims, &opt, format),
        Some(Command::Inspect {
            model,
            format: Format::Json,
            ..
        }) => inspect_json(&model),
        Some(Command::Inspect { model, ir, .. }) => inspect(&model, ir),
        Some(Command::Verify(args)) => Ok(onnx_safeify::verify::run_cli(&args)),
        Some(Command::Doctor(a)) => doctor(&a),
        Some(Command::Bisect(a)) => Ok(onnx_safeify::bisect::run_cli(&a)),
        Some(Command::Probe(a)) => Ok(onnx_safeify::probe::run_cli(&a)),
        Some(Command::Setup {
            what: SetupWhat::Webgpu,
        }) => onnx_safeify::runtime::run::harness::setup()
            .map_err(|e| Error::new(ErrorKind::Io, e.to_string()))
            .and_then(|done| emit(&done).map(|_| 0)),
        Some(Command::Completions { shell }) => completions(shell),
        Some(Command::Man { subcommand }) => man(subcommand.as_deref()),
        None => compile(&cli.compile),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            crate::errln!("error: {e}");
            2
        }
    }
}

/// A spinner on stderr when it is a terminal; invisible otherwise.
fn progress(msg: &str) -> indicatif::ProgressBar {
    if std::io::stderr().is_terminal() {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.set_message(msg.to_string());
        pb.enable_steady_tick(Duration::from_millis(120));
        pb
    } else {
        indicatif::ProgressBar::hidden()
    }
}

/// Print to stdout; a closed pipe (`| head`) is not an error.
fn emit(text: &str) -> Result<(), Error> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::new(
            ErrorKind::Io,
            format!("cannot write to stdout: {e}"),
        )),
    }
}

/// `warning:` lines for `--dim` sizes that name nothing in the model's inputs.
fn warn_dims(doc: &onnx_safeify::Document, model: &Path, opts: &engine::Options) {
    for w in onnx_safeify::compile::dim_warnings(&doc.model, model, &opts.dims) {
        crate::errln!("warning: {w}");
    }
}

fn load_target(a: &TargetArgs) -> Result<Target, Error> {
    let spec = a.target.as_deref().ok_or_else(|| {
        Error::new(
            ErrorKind::Usage,
            "--target is required (see `onnx-safeify targets`)",
        )
    })?;
    onnx_safeify::compile::load_target(spec, &a.rules)
}

fn options(a: &TargetArgs) -> Result<engine::Options, Error> {
    let mut dims = match &a.inputs {
        Some(p) => onnx_safeify::compile::dims_from_npz(p)?,
        None => Vec::new(),
    };
    for d in &a.dims {
        dims.push(onnx_safeify::compile::parse_dim(d)?);
    }
    let mut o = onnx_safeify::compile::options(dims)?;
    o.nchwc_block = a.nchwc_block;
    o.allow_approximate = a.allow_approximate;
    o.raise_opset = !a.keep_opset;
    Ok(o)
}

/// `onnx-safeify DIR --target T` on an onnxruntime-genai folder: a new folder (`-o`, default
/// `DIR.T` beside DIR) with each model the config names compiled, the config with the target's
/// runtime settings merged in, and every other file copied; moved into place only when every
/// model compiled.
fn compile_genai_folder(a: &CompileArgs, dir: &Path) -> Result<u8, Error> {
    use onnx_safeify::genai;
    let folder = genai::read(dir)?;
    let target = load_target(&a.target)?;
    let slug = target_slug(&target);
    let final_dir = a.output.clone().unwrap_or_else(|| {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        dir.with_file_name(format!("{name}.{slug}"))
    });
    let same = |x: &Path, y: &Path| matches!((x.canonicalize(), y.canonicalize()), (Ok(p), Ok(q)) if p == q);
    if same(&final_dir, dir) {
        return Err(Error::new(
            ErrorKind::Usage,
            "the output folder is the input folder; give another with -o",
        )
        .in_file(dir));
    }
    if a.report.is_some() && folder.models.len() > 1 {
        return Err(Error::new(
            ErrorKind::Usage,
            "--report takes one model; this folder's config names several",
        )
        .in_file(dir));
    }
    if a.cpu_subgraphs == Some(CpuMode::Partition) {
        return Err(Error::new(
            ErrorKind::Usage,
            "--cpu-subgraphs partition does not apply to a genai folder (its config names whole models)",
        )
        .in_file(dir));
    }
    let staging = genai::Staging::create(&final_dir)?;
    for m in &folder.models {
        let mut sub = a.clone();
        sub.model = Some(dir.join(m));
        sub.output = Some(staging.path.join(m));
        sub.staged = Some((staging.path.clone(), final_dir.clone()));
        let code = compile(&sub)?;
        if code != 0 {
            return Ok(code);
        }
    }
    // The user's config with the settings merged in, as text: its order and layout kept.
    let text = match genai::merged_config_text(&folder.text, &target.runtime) {
        Some(t) => t,
        None => {
            let config = genai::merged_config(&folder.config, &target.runtime);
            serde_json::to_string_pretty(&config)
                .map_err(|e| Error::new(ErrorKind::Io, format!("cannot write the config: {e}")))?
                + "\n"
        }
    };
    let cfg = staging.path.join(genai::CONFIG);
    std::fs::write(&cfg, text).map_err(|e| Error::io(&cfg, "cannot write", e))?;
    let placed: Vec<PathBuf> = std::fs::read_dir(&staging.path)
        .map_err(|e| Error::io(&staging.path, "cannot list", e))?
        .filter_map(|e| e.ok())
        .map(|e| dir.join(e.file_name()))
        .collect();
    for f in genai::other_files(&folder, &placed)? {
        let name = f.file_name().map(PathBuf::from).unwrap_or_default();
        genai::copy_entry(&f, &staging.path.join(name))?;
    }
    staging.persist(&final_dir)?;
    crate::errln!(
        "wrote folder {} ({} model(s) for {}, {} with the target's runtime settings)",
        final_dir.display(),
        folder.models.len(),
        target.name,
        genai::CONFIG
    );
    Ok(0)
}

fn default_output(model: &Path, target: &str, ext: &str) -> PathBuf {
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    model.with_file_name(format!("{stem}.{target}.{ext}"))
}

/// A file-system-friendly form of a target name (a rules file's stem).
fn target_slug(t: &Target) -> String {
    t.name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Bytes the rewrites may add to an input of `input` bytes before the size guard refuses the
/// output (`--allow-growth [FACTOR]`; without it, 2x the input, or 64 MiB for a small one).
fn growth_allowed(input: u64, allow_growth: Option<f64>) -> u64 {
    const FREE: u64 = 64 << 20;
    match allow_growth {
        None => input.max(FREE),
        Some(f) if f.is_nan() => 0,
        Some(f) => {
            let extra = (f - 1.0) * input as f64;
            if extra >= u64::MAX as f64 {
                u64::MAX
            } else {
                extra.max(0.0) as u64
            }
        }
    }
}

fn compile(a: &CompileArgs) -> Result<u8, Error> {
    let model = a
        .model
        .as_deref()
        .ok_or_else(|| Error::new(ErrorKind::Usage, "a MODEL is required"))?;
    if onnx_safeify::genai::is_genai_folder(model) {
        return compile_genai_folder(a, model);
    }
    let target = load_target(&a.target)?;
    let mut opts = options(&a.target)?;
    opts.strict = a.strict;
    let start = Instant::now();
    // A path as the user will find it (inside a genai folder's final place, not its staging).
    let shown = |p: &Path| -> PathBuf {
        match &a.staged {
            Some((staging, final_dir)) => match p.strip_prefix(staging) {
                Ok(rest) => final_dir.join(rest),
                Err(_) => p.to_path_buf(),
            },
            None => p.to_path_buf(),
        }
    };
    let slug = target_slug(&target);
    let annotate_out = || {
        a.output
            .clone()
            .unwrap_or_else(|| default_output(model, &slug, "onnx"))
    };
    // The output file is started beside the output by a second thread. A target without rules
    // leaves the model as it is: the input is copied while the model is read and checked (the
    // copy becomes the output if it is unchanged).
    let annotate = a.cpu_subgraphs != Some(CpuMode::Partition);
    let mut early = (annotate && target.rules.is_empty())
        .then(|| onnx_safeify::io::EarlyCopy::start(model, &annotate_out()))
        .flatten();
    if let Some(hook) = LARGE_INPUT.get() {
        if std::fs::metadata(model).is_ok_and(|m| m.len() >= onnx_safeify::io::early::PREPARE_MIN) {
            hook();
        }
    }
    let pb = progress(&format!("reading {}", model.display()));
    let mut doc = onnx_safeify::load(model)?;
    warn_dims(&doc, model, &opts);
    doc.weights = a.weights.into();
    let inline_before = onnx_safeify::inline_bytes(&doc.model);
    let input_size = onnx_safeify::input_size(&doc);
    // The unpacked MatMulNBits form may unpack weights from external data up to what the size
    // guard below lets the output grow by, and no further than a model file protobuf can hold
    // (the unpacked weights are written into it, computed as they are written).
    const PROTOBUF_MAX: u64 = (1 << 31) - (16 << 20);
    opts.unpack_limit =
        growth_allowed(input_size, a.allow_growth).min(PROTOBUF_MAX.saturating_sub(inline_before));
    // Otherwise the file's pages are written ahead while the rules run (not while the model is
    // read, which has threads of its own), for the save to write the output over.
    if annotate && early.is_none() {
        early = onnx_safeify::io::EarlyCopy::prepare(model, &annotate_out());
    }
    let dot_before = a.dot.as_ref().map(|_| dot_text(model, "before", &doc));
    pb.set_message(format!("rewriting for {}", target.name));
    let compiled =
        onnx_safeify::compile::compile_document(&mut doc, &target, &opts, a.allow_unsafe, model);
    pb.finish_and_clear();
    if let (Some(dir), Some(before)) = (&a.dot, &dot_before) {
        write_dot(dir, before, &dot_text(model, "after", &doc))?;
    }
    let compiled = compiled?;
    let report = &compiled.report;

    if !compiled.writable {
        let text = onnx_safeify::report::findings_text(
            &target.name,
            &model.display().to_string(),
            &report.remaining,
        );
        crate::errp!("{text}");
        crate::errln!("error: {}", compiled.blocked_message(model, &target));
        return Ok(1);
    }

    // Weights the rewrites added (unpacked quantized weights, say): stated, and bounded.
    let added = onnx_safeify::inline_bytes(&doc.model).saturating_sub(inline_before);
    // (Small constants of a rewrite are not news; a MiB of weights is.)
    if added >= 1 << 20 {
        let input = input_size;
        let factor = a.allow_growth.unwrap_or(2.0);
        let mb = |b: u64| b as f64 / 1e6;
        crate::errln!(
            "size: the rewrites add {:.1} MB of weights to an input of {:.1} MB (output about {:.1} MB)",
            mb(added),
            mb(input),
            mb(input + added)
        );
        // Small models may double freely; the bound is for what fills a disk.
        const FREE: u64 = 64 << 20;
        let over = (input + added) as f64 > factor * input as f64;
        if factor.is_nan() || (over && (a.allow_growth.is_some() || added > FREE)) {
            crate::errln!(
                "error: {}: the output would be {:.1}x the input's size (limit {factor}x); nothing was written (--allow-growth [FACTOR] lets it grow)",
                model.display(),
                (input + added) as f64 / input.max(1) as f64
            );
            return Ok(1);
        }
    }

    // A target whose runtime ignores pins (`cpu_subgraphs: partition`) gets a partition when the
    // compile pinned nodes; a model with nothing pinned is written as one model, as before.
    let ann = opts.annotation.clone();
    let partition_target = target.cpu_subgraphs == onnx_safeify::rules::CpuSubgraphs::Partition;
    let pinned = |n: &onnx_safeify::ir::Node| n.metadata("layer_ann") == Some(ann.as_str());
    let pins = partition_target
        && doc
            .model
            .graph
            .order
            .iter()
            .any(|&n| onnx_safeify::partition::holds_pin(doc.model.graph.node(n), &pinned));
    let mode = match a.cpu_subgraphs {
        Some(CpuMode::Annotate) if pins => {
            return Err(Error::new(
                ErrorKind::Usage,
                format!(
                    "target {} runs on a runtime that ignores CPU pins (`cpu_subgraphs: partition`), \
                     and this compile pins nodes to the CPU: an annotated model would not load there; \
                     nothing was written (leave out --cpu-subgraphs, or give --cpu-subgraphs partition)",
                    target.name
                ),
            )
            .in_file(model));
        }
        Some(m) => m,
        None if pins => CpuMode::Partition,
        None => CpuMode::Annotate,
    };
    if mode == CpuMode::Partition {
        // The early copy was started for a single model.
        drop(early.take());
    }
    let outputs: Vec<PathBuf> = match mode {
        CpuMode::Annotate => {
            let out = annotate_out();
            let written = onnx_safeify::save_with(&doc, &out, early)?;
            for (file, how) in &written.shared {
                crate::errln!(
                    "external data: {} ({})",
                    shown(file).display(),
                    how.as_str()
                );
            }
            if let Some(f) = &written.external_file {
                crate::errln!(
                    "external data: {} ({} bytes written)",
                    shown(f).display(),
                    written.external_bytes
                );
            }
            vec![out]
        }
        CpuMode::Partition => {
            let asked = a.cpu_subgraphs == Some(CpuMode::Partition);
            let mut manifest = a
                .output
                .clone()
                .unwrap_or_else(|| default_output(model, &slug, "manifest.yaml"));
            // The manifest is YAML: a `.onnx` name would hand tools a text file to load.
            let is_onnx = manifest
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("onnx"));
            if is_onnx && asked {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!(
                        "--cpu-subgraphs partition writes a YAML manifest at -o (the segments \
                         beside it): '{}' is an .onnx name; give a .yaml one, e.g. '{}'",
                        manifest.display(),
                        manifest.with_extension("yaml").display()
                    ),
                ));
            }
            if is_onnx {
                manifest = manifest.with_extension("manifest.yaml");
            }
            if !asked {
                crate::errln!(
                    "note: target {} runs on a runtime that ignores CPU pins (`cpu_subgraphs: partition`): \
                     the CPU work is written as segment models, listed by the manifest {}",
                    target.name,
                    shown(&manifest).display()
                );
            }
            let g = &doc.model.graph;
            let facts = onnx_safeify::infer::infer_model(&doc.model, &Default::default());
            let cpu_side = partition_target.then(|| {
                let rank_known = |v| facts.info(v).shape.is_some();
                let (cpu, added) = onnx_safeify::partition::cpu_side(g, &pinned, &rank_known);
                if !added.is_empty() {
                    let names: Vec<String> = added
                        .iter()
                        .map(|&n| {
                            let node = g.node(n);
                            format!("{} ({})", node.name.as_deref().unwrap_or("?"), node.op_type)
                        })
                        .collect();
                    crate::errln!(
                        "partition: {} node(s) read a value of unknown rank made on the CPU and run on the CPU too \
                         (a GPU segment cannot take such a value as an input): {}",
                        added.len(),
                        names.join(", ")
                    );
                }
                cpu
            });
            let is_cpu = |n| match &cpu_side {
                Some(cpu) => cpu.contains(&n),
                None => g.node(n).metadata("layer_ann") == Some(ann.as_str()),
            };
            let segs = onnx_safeify::partition::plan(g, &is_cpu).map_err(|e| e.in_file(model))?;
            let type_of = |v| tensor_type(&facts, v);
            let models = onnx_safeify::partition::segment_models(&doc.model, &segs, &type_of)
                .map_err(|e| e.in_file(model))?;
            onnx_safeify::partition::save_partitioned(&doc, &segs, models, &manifest)?
        }
    };
    crate::errp!("{}", onnx_safeify::report::summary_text(report, &target));
    if !report.remaining.is_empty() {
        crate::errp!(
            "{}",
            onnx_safeify::report::findings_text(
                &target.name,
                &model.display().to_string(),
                &report.remaining
            )
        );
    }
    let primary = outputs.last().cloned().unwrap_or_default();
    let unknown = doc.source.unknown()?.list().len();
    if unknown > 0 {
        crate::errln!(
            "kept {unknown} field(s) that this tool's ONNX schema does not define (a newer ONNX's data?), each in the message that held it"
        );
    }
    crate::errln!(
        "wrote {} in {:.0} ms",
        outputs
            .iter()
            .map(|p| shown(p).display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        start.elapsed().as_secs_f64() * 1000.0
    );
    if let Some(path) = &a.report {
        let names: Vec<String> = outputs
            .iter()
            .map(|p| shown(p).display().to_string())
            .collect();
        let json = onnx_safeify::report::compile_json(
            report,
            &target,
            &model.display().to_string(),
            &names,
        );
        std::fs::write(path, json).map_err(|e| Error::io(path, "cannot write the report", e))?;
    }
    release(doc);
    if a.verify {
        return verify_output(model, &primary, &outputs);
    }
    Ok(0)
}

fn tensor_type(
    facts: &onnx_safeify::infer::Facts,
    v: onnx_safeify::ir::ValueId,
) -> Option<onnx_safeify::proto::TypeProto> {
    use onnx_safeify::infer::Dim;
    use onnx_safeify::proto::{tensor_shape_proto, type_proto, TensorShapeProto, TypeProto};
    let info = facts.info(v);
    let elem = info.dtype?;
    let shape = info.shape.as_ref().map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|d| tensor_shape_proto::Dimension {
                value: match d {
                    Dim::Known(k) => Some(tensor_shape_proto::dimension::Value::DimValue(*k)),
                    Dim::Sym(s) => Some(tensor_shape_proto::dimension::Value::DimParam(
                        s.to_string(),
                    )),
                    Dim::Unknown => None,
                },
                denotation: None,
            })
            .collect(),
    });
    Some(TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(elem),
            shape,
        })),
        denotation: None,
    })
}

/// `--verify`: run both models; an unfaithful (or unverifiable) output is removed.
fn verify_output(model: &Path, out: &Path, all: &[PathBuf]) -> Result<u8, Error> {
    let opts = onnx_safeify::verify::VerifyOptions::default();
    let remove_all = || {
        for p in all {
            let _ = std::fs::remove_file(p);
        }
        if let Some(first) = all.first() {
            let _ = std::fs::remove_file(first.with_file_name(format!(
                "{}.data",
                first.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
            )));
        }
    };
    match onnx_safeify::verify::verify_models(model, out, &opts) {
        Ok(report) if report.passed() => {
            crate::errp!("{}", report.to_text());
            Ok(0)
        }
        Ok(report) => {
            crate::errp!("{}", report.to_text());
            remove_all();
            crate::errln!(
                "error: {}: the rewrite is not faithful; output removed",
                out.display()
            );
            Ok(1)
        }
        Err(e) => {
            remove_all();
            Err(Error::new(
                ErrorKind::Usage,
                format!("verification failed, output removed: {e}"),
            ))
        }
    }
}

/// A model no longer needed. When the process ends next, its memory goes back with it,
/// without a walk over every node and tensor to free it (1-2 % of a compile or a check).
fn release(doc: onnx_safeify::Document) {
    if PROCESS_ENDS.load(std::sync::atomic::Ordering::Relaxed) {
        std::mem::forget(doc);
    }
}

fn check(a: &CheckArgs) -> Result<u8, Error> {
    let target = load_target(&a.target)?;
    let opts = options(&a.target)?;
    let mut doc = onnx_safeify::load(&a.model)?;
    warn_dims(&doc, &a.model, &opts);
    let findings = engine::check(&mut doc.model, &target, &opts);
    let name = a.model.display().to_string();
    // What the runtime runs on the CPU by itself: a warning, not a finding (nothing to fix
    // in the model; the cost counts it).
    let placed = onnx_safeify::cost::predict_for_target(&doc.model, &target, &opts);
    let timing = onnx_safeify::timing::for_target(&doc.model, &target, &opts);
    match a.format {
        Format::Text => {
            let mut text = onnx_safeify::report::findings_text(&target.name, &name, &findings);
            if let Some(note) = placed.as_ref().and_then(|p| p.moved_note()) {
                text.push_str(&format!("warning: {note}\n"));
            }
            if let Some(t) = &timing {
                text.push_str(&onnx_safeify::report::check_timing_text(&name, t));
            }
            emit(&text)?
        }
        Format::Json => {
            let cost = onnx_safeify::cost::for_target(&doc.model, &target, &opts);
            let mut v: serde_json::Value =
                serde_json::from_str(&onnx_safeify::report::findings_json_with_timing(
                    &target.name,
                    &name,
                    &findings,
                    Some(&cost),
                    timing.as_ref(),
                ))
                .unwrap_or_default();
            if let (Some(p), Some(o)) = (placed.as_ref(), v.as_object_mut()) {
                o.insert(
                    "runtime_cpu".into(),
                    serde_json::to_value(p.moved().collect::<Vec<_>>()).unwrap_or_default(),
                );
            }
            emit(&(serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"))?
        }
    }
    release(doc);
    Ok(if findings.is_empty() { 0 } else { 1 })
}

fn explain(a: &ExplainArgs) -> Result<u8, Error> {
    use onnx_safeify::rules::matcher::{Matcher, Opsets};
    let target = load_target(&a.target)?;
    let opts = options(&a.target)?;
    let doc = onnx_safeify::load(&a.model)?;
    warn_dims(&doc, &a.model, &opts);
    // Named sizes only, as before the pass redesign (check and compile also fill unnamed dims).
    let sizes = onnx_safeify::analysis::Sizes {
        named: engine::dim_sizes(&doc.model, &target, &opts),
        positional: Vec::new(),
    };
    // Every graph, bodies included: inner nodes are named by their scope path
    // (`loop/body/conv_3`).
    let scopes = engine::scopes_with_facts(&doc.model, &sizes);
    let opsets = Opsets::from_model(&doc.model);
    let mut out = String::new();
    match &a.node {
        Some(name) => {
            // A main-graph name first, then a qualified one.
            let found = scopes
                .iter()
                .find_map(|(sg, f)| {
                    let g = sg.graph;
                    let n = g
                        .order
                        .iter()
                        .copied()
                        .find(|&n| g.node(n).name() == name)?;
                    sg.path.is_root().then_some((sg, f, n))
                })
                .or_else(|| {
                    scopes.iter().find_map(|(sg, f)| {
                        let g = sg.graph;
                        let n = g
                            .order
                            .iter()
                            .copied()
                            .find(|&n| sg.path.qualify(g.node(n).name()) == *name)?;
                        Some((sg, f, n))
                    })
                });
            let (sg, facts, node) = found.ok_or_else(|| {
                Error::new(ErrorKind::Usage, format!("no node named '{name}'")).in_file(&a.model)
            })?;
            let matcher = Matcher::new(sg.graph, facts, &opsets);
            out.push_str(&format!(
                "node '{name}' ({}):\n",
                sg.graph.node(node).op_type
            ));
            for e in matcher.explain(&target, node) {
                out.push_str(&format!("  {e}\n"));
            }
            // What each matching rule's rewrite promises (unfuse, cast).
            let n = sg.graph.node(node);
            for m in matcher.find(&target).iter().filter(|m| m.node == node) {
                let r = &target.rules[m.rule];
                let class = match &r.action {
                    onnx_safeify::rules::schema::Action::Unfuse => {
                        Some(unfuse_exactness(n.domain(), &n.op_type))
                    }
                    onnx_safeify::rules::schema::Action::Cast { from, to, isolated } => {
                        Some(cast_exactness(*from, *to, *isolated))
                    }
                    _ => None,
                };
                if let Some(c) = class {
                    out.push_str(&format!("  {}: exactness {c}\n", r.id));
                }
            }
        }
        None => {
            let mut hits: Vec<Vec<String>> = vec![Vec::new(); target.rules.len()];
            for (sg, facts) in &scopes {
                let g = sg.graph;
                for m in Matcher::new(g, facts, &opsets).find(&target) {
                    let n = g.node(m.node);
                    let label = sg.path.qualify(if n.name().is_empty() {
                        "<unnamed>"
                    } else {
                        n.name()
                    });
                    let mut hit = format!("{label} ({})", n.op_type);
                    // An unfuse rule: the class of the decomposition of this node's op.
                    if target.rules[m.rule].action == onnx_safeify::rules::schema::Action::Unfuse {
                        hit.push_str(&format!(" [{}]", unfuse_exactness(n.domain(), &n.op_type)));
                    }
                    hits[m.rule].push(hit);
                }
            }
            out.push_str(&format!(
                "target {} ({}): {} rule(s)\n",
                target.name,
                target.description,
                target.rules.len()
            ));
            for (r, hits) in target.rules.iter().zip(&hits) {
                out.push_str(&format!(
                    "{} -> {}: {} node(s)\n",
                    r.id,
                    r.action,
                    hits.len()
                ));
                out.push_str(&format!("  why: {}\n", r.why));
                if let onnx_safeify::rules::schema::Action::Cast { from, to, isolated } = &r.action
                {
                    out.push_str(&format!(
                        "  exactness: {}\n",
                        cast_exactness(*from, *to, *isolated)
                    ));
                }
                for h in hits.iter().take(20) {
                    out.push_str(&format!("  - {h}\n"));
                }
                if hits.len() > 20 {
                    out.push_str(&format!("  ... and {} more\n", hits.len() - 20));
                }
            }
        }
    }
    emit(&out)?;
    Ok(0)
}

/// The exactness class of the decomposition `unfuse` uses for this op, in words.
fn unfuse_exactness(domain: &str, op: &str) -> String {
    use onnx_safeify::rewrite::Exactness;
    match onnx_safeify::rewrite::unfuse::exactness_of(domain, op) {
        None => "no decomposition: falls back".into(),
        Some(e @ Exactness::Approximate(..)) => format!(
            "approximate, {}; runs only with --allow-approximate",
            e.bound_text()
        ),
        Some(e) => e.name().into(),
    }
}

/// What a `cast` rule's rewrite is: a precision fence between float types (the op computed
/// in another precision: approximate), or a narrowing of integer types (exact while the
/// values fit, as valid indices do).
fn cast_exactness(from: i32, to: i32, isolated: bool) -> String {
    use onnx_safeify::rewrite::Exactness;
    use onnx_safeify::tensor::dtype::{BFLOAT16, DOUBLE, FLOAT, FLOAT16};
    use onnx_safeify::tensor::dtype_name;
    let float = |t: i32| [FLOAT, FLOAT16, BFLOAT16, DOUBLE].contains(&t);
    let (f, t) = (dtype_name(from), dtype_name(to));
    if float(from) && float(to) && isolated {
        format!(
            "exact (only the {f} nodes ONNX Runtime's CPU provider itself computes in {t}: a node with a {f} kernel alone between nodes without one)"
        )
    } else if float(from) && float(to) {
        let e = Exactness::Approximate(onnx_safeify::rewrite::cast::PRECISION_FENCE_BOUND, 0.0);
        format!(
            "approximate (a precision fence, {f} computed in {t}): {}; runs only with --allow-approximate",
            e.bound_text()
        )
    } else {
        format!("exact (an index narrowing, {f} to {t}: exact while the values fit)")
    }
}

fn targets() -> Result<u8, Error> {
    let mut out = String::new();
    for name in onnx_safeify::rules::builtin::builtin_names() {
        let t = onnx_safeify::rules::load_target(name)?;
        let plural = |n: usize, one: &'static str, many: &'static str| {
            if n == 1 {
                one
            } else {
                many
            }
        };
        out.push_str(&format!(
            "{:<14} {:>3} {:<5}  {:>2} runtime {:<8}  {}\n",
            t.name,
            t.rules.len(),
            plural(t.rules.len(), "rule", "rules"),
            t.runtime.len(),
            plural(t.runtime.len(), "setting", "settings"),
            t.description
        ));
    }
    emit(&out)?;
    Ok(0)
}

fn inspect(model: &Path, ir: bool) -> Result<u8, Error> {
    let doc = onnx_safeify::load(model)?;
    if ir {
        emit(&onnx_safeify::ir::dump::dump_model(&doc.model))?;
    } else {
        let s = onnx_safeify::inspect::summarize(&doc.model);
        emit(&onnx_safeify::inspect::render_text(&s))?;
    }
    Ok(0)
}

fn doctor(a: &DoctorArgs) -> Result<u8, Error> {
    let log = if a.log.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot read standard input: {e}")))?;
        s
    } else {
        let bytes =
            std::fs::read(&a.log).map_err(|e| Error::io(&a.log, "cannot read the log", e))?;
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let mut doc = match &a.model {
        Some(m) => Some(onnx_safeify::load(m)?),
        None => None,
    };
    let mut ds = onnx_safeify::doctor::diagnose(&log, doc.as_ref().map(|d| &d.model));
    if let Some(doc) = doc.as_mut() {
        onnx_safeify::doctor::cover(&mut ds, |t| {
            let (Ok(target), Ok(opts)) = (
                onnx_safeify::compile::load_target(t, &[]),
                onnx_safeify::compile::options(Vec::new()),
            ) else {
                return Vec::new();
            };
            engine::check(&mut doc.model, &target, &opts)
                .into_iter()
                .map(|f| (f.node, f.rule, f.action))
                .collect()
        });
    }
    match a.format {
        Format::Text => emit(&onnx_safeify::doctor::render_text_for(
            &ds,
            a.model.as_deref().and_then(Path::to_str),
        ))?,
        Format::Json => emit(&onnx_safeify::doctor::render_json(&ds))?,
    }
    Ok(0)
}

fn inspect_placement(
    model: &Path,
    t: &str,
    dims: &[String],
    opt: &str,
    format: Format,
) -> Result<u8, Error> {
    let level = onnx_safeify::runtime::transforms::Level::parse(opt).ok_or_else(|| {
        Error::new(
            ErrorKind::Usage,
            format!("unknown --opt level `{opt}` (disabled, basic, extended or all)"),
        )
    })?;
    let target = onnx_safeify::compile::load_target(t, &[])?;
    let dims = dims
        .iter()
        .map(|d| onnx_safeify::compile::parse_dim(d))
        .collect::<Result<Vec<_>, Error>>()?;
    let opts = onnx_safeify::compile::options(dims)?;
    let profile = onnx_safeify::cost::profile_of(&target).ok_or_else(|| {
        Error::new(
            ErrorKind::Usage,
            format!(
                "target '{}' names no execution provider (`provider:`), so there is no placement to predict",
                target.name
            ),
        )
    })?;
    let doc = onnx_safeify::load(model)?;
    let sizes = onnx_safeify::analysis::Sizes::for_model(
        &doc.model,
        &opts.dims,
        &onnx_safeify::rewrite::pass::assumed_sizes(&target),
    );
    let facts = sizes.infer(&doc.model);
    let r = onnx_safeify::runtime::placement_report(
        &doc.model,
        &facts,
        &target.name,
        profile,
        &opts.annotation,
        &onnx_safeify::runtime::transforms::Session::for_target(&target, level),
    );
    match format {
        Format::Text => emit(&r.text())?,
        Format::Json => emit(&(serde_json::to_string_pretty(&r).unwrap_or_default() + "\n"))?,
    }
    Ok(0)
}

fn inspect_json(model: &Path) -> Result<u8, Error> {
    let doc = onnx_safeify::load(model)?;
    let s = onnx_safeify::inspect::summarize(&doc.model);
    emit(&onnx_safeify::inspect::to_json(&s))?;
    Ok(0)
}

/// The main graph of `doc` as DOT, titled with the model's file name and `when`.
fn dot_text(model: &Path, when: &str, doc: &onnx_safeify::Document) -> String {
    let name = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    onnx_safeify::ir::dot::render(&doc.model.graph, &format!("{name} ({when})"))
}

/// `--dot DIR`: `DIR/before.dot` and `DIR/after.dot` (DIR is created when missing).
fn write_dot(dir: &Path, before: &str, after: &str) -> Result<(), Error> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(dir, "cannot create the --dot folder", e))?;
    for (file, text) in [("before.dot", before), ("after.dot", after)] {
        let path = dir.join(file);
        std::fs::write(&path, text).map_err(|e| Error::io(&path, "cannot write", e))?;
    }
    Ok(())
}

fn completions(shell: clap_complete::Shell) -> Result<u8, Error> {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "onnx-safeify", &mut buf);
    emit(&String::from_utf8_lossy(&buf))?;
    Ok(0)
}

fn man(subcommand: Option<&str>) -> Result<u8, Error> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let page = match subcommand {
        None => cmd,
        Some(name) => {
            let sub = cmd.find_subcommand(name).cloned().ok_or_else(|| {
                let names: Vec<String> = cmd
                    .get_subcommands()
                    .map(|c| c.get_name().to_string())
                    .collect();
                Error::new(
                    ErrorKind::Usage,
                    format!("no subcommand '{name}' (subcommands: {})", names.join(", ")),
                )
            })?;
            let (page, usage) = (
                format!("onnx-safeify-{}", sub.get_name()),
                format!("onnx-safeify {}", sub.get_name()),
            );
            sub.display_name(page).bin_name(usage)
        }
    };
    let mut buf = Vec::new();
    clap_mangen::Man::new(page)
        .source(format!("onnx-safeify {}", env!("CARGO_PKG_VERSION")))
        .manual("onnx-safeify manual")
        .render(&mut buf)
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot render the manual page: {e}")))?;
    emit(&title_first(&String::from_utf8_lossy(&buf)))?;
    Ok(0)
}

/// clap_mangen puts the definition of the apostrophe string (`.ie`/`.el` lines) above `.TH`;
/// pages conventionally begin with `.TH`, and the definition works as well right after it.
fn title_first(page: &str) -> String {
    let lines: Vec<&str> = page.lines().collect();
    let Some(th) = lines.iter().position(|l| l.starts_with(".TH ")) else {
        return page.to_string();
    };
    let mut out: Vec<&str> = Vec::with_capacity(lines.len());
    out.push(lines[th]);
    out.extend(&lines[..th]);
    out.extend(&lines[th + 1..]);
    out.join("\n") + "\n"
}
