//! Rule loader: text → `parse_target_str`, and a `MemFs` of several files with `extends`
//! chains and a `--rules` overlay; loaded targets are matched against the sample model.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = onnx_safeify_fuzz::harness::rules_input(data);
});
