//! The tensor files `verify` reads (`--inputs` / `--expected`): `.npy`, `.npz` and
//! `TensorProto` (`input_0.pb`) bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = onnx_safeify_fuzz::harness::tensors_input(data);
});
