//! Model loader and importer: bytes → decode → import → infer → export → encode, then
//! `engine::check` (and, for small models, `engine::compile`) with the rx580 target.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = onnx_safeify_fuzz::harness::model_input(data);
});
