//! Fields the schema does not define: the wire-level scan, and round trips and compiles of
//! models that hold such fields (see `harness::unknown_input`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = onnx_safeify_fuzz::harness::unknown_input(data);
});
