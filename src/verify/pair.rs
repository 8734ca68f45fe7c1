//! A model on a runtime against ONNX Runtime CPU, for `probe` and `bisect`: both run (through
//! [`crate::runtime::run::named`]), and the runtime's result is judged against the reference:
//! an error of the runtime, or outputs of another shape or beyond a tolerance.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::compare::{self, Judge, Status, Tolerance};
use crate::proto::ModelProto;
use crate::runtime::run::error::VerifyError;
use crate::runtime::run::model::model_info_from_proto;
use crate::runtime::run::named::{run_on, run_reference, Run, Runtime};
use crate::runtime::run::ort::OptLevel;
use crate::runtime::run::ort_ep::FailureClass;
use crate::runtime::run::tensor::{fmt_shape, HostTensor};

/// How a model (a prefix of bisect, a case of probe) fails on the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailKind {
    NoSession,
    RunError,
    DeviceRemoved,
    Timeout,
    Crash,
    /// Ran, but an output differs from ONNX Runtime CPU beyond the tolerance.
    WrongValues,
    /// Ran, but an output has another shape or element type than on ONNX Runtime CPU.
    WrongShape,
}

impl FailKind {
    pub fn label(self) -> &'static str {
        match self {
            FailKind::NoSession => "no session",
            FailKind::RunError => "run error",
            FailKind::DeviceRemoved => "device removed",
            FailKind::Timeout => "timeout",
            FailKind::Crash => "crash",
            FailKind::WrongValues => "wrong values",
            FailKind::WrongShape => "wrong shape",
        }
    }

    fn from_class(c: FailureClass) -> FailKind {
        match c {
            FailureClass::NoSession => FailKind::NoSession,
            FailureClass::RunError => FailKind::RunError,
            FailureClass::DeviceRemoved => FailKind::DeviceRemoved,
            FailureClass::Timeout => FailKind::Timeout,
            FailureClass::Crash => FailKind::Crash,
        }
    }
}

/// How a run on the runtime went, against ONNX Runtime CPU.
pub(crate) struct Outcome {
    /// `None`: it ran and agrees (or the reference itself failed and the runtime ran).
    pub failure: Option<(FailKind, String)>,
    /// ONNX Runtime CPU's outputs, or its error.
    pub reference: Result<HashMap<String, HostTensor>, String>,
}

/// One model to run on a runtime and on ONNX Runtime CPU ([`run_pair`]).
pub(crate) struct PairRun<'a> {
    pub runtime: &'a Runtime,
    /// The model file (written).
    pub path: &'a Path,
    pub proto: &'a ModelProto,
    /// Values to fetch and compare.
    pub outputs: &'a [String],
    pub feed: &'a [(String, HostTensor)],
    pub tolerance: Tolerance,
    pub optimization: OptLevel,
    pub timeout: Duration,
}

/// Runs a model on the runtime (a child process bounded by the timeout) and on ONNX Runtime
/// CPU (in this process), and classifies the runtime's result against the reference. Also
/// returns the runtime's one-line description (versions, device) when a run reported one.
/// `Err`: the run could not be attempted (runtime not installed, unwritable folder).
pub(crate) fn run_pair(pr: &PairRun) -> Result<(Outcome, Option<String>), VerifyError> {
    let r = pr;
    let path = r.path;
    let outputs = r.outputs;
    let tolerance = r.tolerance;
    let info = model_info_from_proto(path, r.proto)?;
    // The reference, in this process.
    let reference = run_reference(path, r.proto, r.feed, r.optimization)?;

    // The runtime, in a child process.
    let (actual, description) = run_on(&Run {
        runtime: r.runtime,
        path,
        info: &info,
        outputs,
        feed: r.feed,
        optimization: r.optimization,
        timeout: r.timeout,
    })?;
    let actual = actual.map_err(|(class, text)| (FailKind::from_class(class), text));
    let failure = match (&actual, &reference) {
        (Err(f), _) => Some(f.clone()),
        (Ok(_), Err(_)) => None,
        (Ok(a), Ok(r)) => {
            let judge = Judge::tolerance(tolerance);
            let mut found = None;
            for name in outputs {
                let Some(b) = r.get(name) else { continue };
                let Some(x) = a.get(name) else {
                    found = Some((
                        FailKind::WrongShape,
                        format!("value '{name}' was not produced"),
                    ));
                    break;
                };
                let c = compare::compare_with(name, b, x, judge);
                match c.status {
                    Status::Ok => {}
                    Status::ShapeMismatch | Status::DtypeMismatch | Status::Missing => {
                        found = Some((
                            FailKind::WrongShape,
                            format!(
                                "value '{name}': {} {} on ONNX Runtime CPU, {} {} here",
                                c.dtype,
                                fmt_shape(&c.shape),
                                c.actual_dtype.clone().unwrap_or_default(),
                                c.actual_shape.as_deref().map(fmt_shape).unwrap_or_default()
                            ),
                        ));
                        break;
                    }
                    Status::Mismatch => {
                        found = Some((
                            FailKind::WrongValues,
                            format!(
                                "value '{name}': {} of {} elements differ from ONNX Runtime CPU, largest difference {:e}",
                                c.mismatched,
                                c.elements,
                                c.max_abs_err.unwrap_or(f64::NAN)
                            ),
                        ));
                        break;
                    }
                }
            }
            found
        }
    };
    Ok((Outcome { failure, reference }, description))
}
