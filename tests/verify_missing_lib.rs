//! No ONNX Runtime library: a clear one-line error and exit code 2, without poisoning
//! anything (this file is its own test process, since it sets environment variables).

mod verify_support;

use onnx_safeify::runtime::run::discover::{find_onnxruntime, Discovery};
use onnx_safeify::verify::cli::parse_args;
use onnx_safeify::verify::{run_cli, verify_models, VerifyError, VerifyOptions};
use verify_support::*;

#[test]
fn missing_library_is_a_clear_exit_2_and_a_real_one_still_loads_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_model(dir.path(), "a.onnx", &two_output_model());
    let a = a.to_str().unwrap();

    // Discovery alone: nothing is loaded on the way to the error.
    let d = Discovery {
        explicit: Some("/nonexistent/libonnxruntime.so".into()),
        python: false,
        ..Discovery::default()
    };
    let err = find_onnxruntime(&d).unwrap_err();
    assert!(matches!(err, VerifyError::RuntimeNotFound(_)));
    let msg = err.to_string();
    assert!(msg.contains("/nonexistent/libonnxruntime.so"), "{msg}");
    assert!(msg.contains("pip install onnxruntime"), "{msg}");
    assert!(!msg.contains('\n'));

    // Through the command: ORT_DYLIB_PATH pointing nowhere, Python discovery disabled.
    // SAFETY (edition 2021: set_var is safe): this test is alone in its process.
    std::env::set_var("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so");
    std::env::set_var("ONNX_SAFEIFY_NO_PYTHON_DISCOVERY", "1");
    assert_eq!(run_cli(&parse_args([a, a]).unwrap()), 2);
    // Neither variable set and discovery disabled: says how to get the library.
    std::env::remove_var("ORT_DYLIB_PATH");
    let err = verify_models(a.as_ref(), a.as_ref(), &VerifyOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("ONNX_SAFEIFY_NO_PYTHON_DISCOVERY=1"), "{msg}");
    assert!(msg.contains("ORT_DYLIB_PATH"), "{msg}");
    assert_eq!(run_cli(&parse_args([a, a]).unwrap()), 2);

    // A file that is not a library: the loader's error, exit 2.
    let not_lib = dir.path().join("libonnxruntime.so");
    std::fs::write(&not_lib, b"not a shared object").unwrap();
    let args = parse_args([a, a, "--ort-library", not_lib.to_str().unwrap()]).unwrap();
    assert_eq!(run_cli(&args), 2);
    let opts = VerifyOptions {
        discovery: Some(Discovery {
            explicit: Some(not_lib.clone()),
            ..Discovery::default()
        }),
        ..VerifyOptions::default()
    };
    let err = verify_models(a.as_ref(), a.as_ref(), &opts).unwrap_err();
    assert!(matches!(err, VerifyError::RuntimeLoad { .. }), "{err}");

    // None of that poisoned the process: with discovery back on, the real library loads.
    std::env::remove_var("ONNX_SAFEIFY_NO_PYTHON_DISCOVERY");
    if !runtime_available() {
        return;
    }
    assert_eq!(run_cli(&parse_args([a, a]).unwrap()), 0);
}
