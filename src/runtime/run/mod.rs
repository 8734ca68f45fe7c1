//! Running a model for real: on ONNX Runtime in this process, on an ONNX Runtime execution
//! provider or another runtime in a child process, and reading back where the runtime put each
//! node. `verify`, `probe` and `bisect` are its users; nothing here knows of them.
//!
//! The pieces, from the ground up:
//! - [`error`]: the errors of running (and of verify, which reports them), each one line;
//! - [`dtype`], [`tensor`], [`npz`]: element types, tensors in host memory, `.npy`/`.npz`
//!   (the files the child processes exchange);
//! - [`model`]: a model's inputs, outputs, `layer_ann` pins and index uses, read from the
//!   ModelProto;
//! - [`discover`]: finding the ONNX Runtime library and the venv's Python;
//! - [`ort`]: ONNX Runtime through the `ort` crate, loaded once per process, and its sessions;
//! - [`ort_ep`]: an ONNX Runtime execution provider through the venv's `onnxruntime`
//!   (`ort-ep:NAME`);
//! - [`harness`]: the onnxruntime-web harness (scripts shipped in the binary, `setup webgpu`);
//! - [`external`]: the runtimes by name ([`external::RuntimeKind`]) and the helper processes for
//!   onnxruntime-web in Chromium and OpenVINO;
//! - [`named`]: a runtime `probe` and `bisect` name (`ort-ep:NAME`, `webgpu`, `openvino`), one
//!   run of a model there, and the same model on ONNX Runtime CPU, the reference;
//! - [`log`]: the placement an ONNX Runtime verbose log records.

pub mod discover;
pub mod dtype;
pub mod error;
pub mod external;
pub mod harness;
pub mod log;
pub mod model;
pub mod named;
pub mod npz;
pub mod ort;
pub mod ort_ep;
pub mod tensor;
