//! The `onnx-safeify` command: parses arguments, calls the library, maps results to exit codes
//! (0 ok, 1 findings, 2 any error).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use onnx_safeify::{Error, ErrorKind};

// The IR is many small allocations; mimalloc halves import/export time against glibc's malloc.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "onnx-safeify",
    version,
    about = "Rewrite ONNX models so they run safely on GPUs and drivers with known hazards",
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
    /// Show what a model contains: IR version, opsets, inputs/outputs, op histogram, weights.
    Inspect {
        /// The model file.
        model: PathBuf,
        /// Print the full IR as text instead of a summary.
        #[arg(long)]
        ir: bool,
    },
    /// Prove that a rewritten model computes the same function as the original (ONNX Runtime, CPU).
    Verify(onnx_safeify::verify::VerifyArgs),
}

#[derive(Args, Debug)]
struct CompileArgs {
    /// The model to rewrite.
    #[arg(required = true)]
    model: Option<PathBuf>,
    /// The target: a built-in name (`none`: no rules, a pure round trip) or a rules file.
    #[arg(long, short = 't', required = true)]
    target: Option<String>,
    /// Where to write the result (default: MODEL's stem + `.TARGET.onnx` beside it).
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    /// Verify the output against the input on ONNX Runtime (CPU) right after compiling; when
    /// it is not faithful, remove the output and exit 1.
    #[arg(long)]
    verify: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Inspect { model, ir }) => inspect(&model, ir),
        Some(Command::Verify(args)) => Ok(onnx_safeify::verify::run_cli(&args)),
        None => match (cli.compile.model, cli.compile.target) {
            (Some(model), Some(target)) => compile(
                &model,
                &target,
                cli.compile.output.as_deref(),
                cli.compile.verify,
            ),
            _ => Err(Error::new(
                ErrorKind::Usage,
                "a MODEL and --target are required",
            )),
        },
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
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

fn target_name(target: &str) -> Result<String, Error> {
    match target {
        "none" => Ok("none".to_string()),
        t if t.ends_with(".yaml") || t.ends_with(".yml") => Err(Error::new(
            ErrorKind::Rules,
            format!("rule files are not supported yet ({t})"),
        )),
        t => Err(Error::new(
            ErrorKind::Usage,
            format!("unknown target '{t}' (built-in targets: none)"),
        )),
    }
}

fn default_output(model: &Path, target: &str) -> PathBuf {
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    model.with_file_name(format!("{stem}.{target}.onnx"))
}

fn compile(model: &Path, target: &str, output: Option<&Path>, verify: bool) -> Result<u8, Error> {
    let name = target_name(target)?;
    let out = output
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_output(model, &name));
    let start = Instant::now();
    let pb = progress(&format!("reading {}", model.display()));
    let doc = onnx_safeify::load(model)?;
    pb.set_message(format!("writing {}", out.display()));
    let summary = onnx_safeify::save(&doc, &out)?;
    pb.finish_and_clear();
    eprintln!(
        "wrote {} ({} bytes{}) for target {name} in {:.0} ms",
        out.display(),
        summary.bytes,
        summary
            .external_file
            .as_ref()
            .map(|p| format!(
                ", external data {} bytes in {}",
                summary.external_bytes,
                p.display()
            ))
            .unwrap_or_default(),
        start.elapsed().as_secs_f64() * 1000.0
    );
    if verify {
        return verify_output(model, &out);
    }
    Ok(0)
}

/// `--verify`: run both models; an unfaithful (or unverifiable) output is removed.
fn verify_output(model: &Path, out: &Path) -> Result<u8, Error> {
    let opts = onnx_safeify::verify::VerifyOptions::default();
    let result = onnx_safeify::verify::verify_models(model, out, &opts);
    match result {
        Ok(report) if report.passed() => {
            eprint!("{}", report.to_text());
            Ok(0)
        }
        Ok(report) => {
            eprint!("{}", report.to_text());
            let _ = std::fs::remove_file(out);
            eprintln!(
                "error: {}: the rewrite is not faithful; output removed",
                out.display()
            );
            Ok(1)
        }
        Err(e) => {
            let _ = std::fs::remove_file(out);
            Err(Error::new(
                ErrorKind::Usage,
                format!("verification failed, output removed: {e}"),
            ))
        }
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
