//! Compiles `proto/onnx.proto` into prost types without a system `protoc`:
//! `protox` parses the schema into a descriptor set, `prost-build` turns that into Rust.

fn main() {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let fds = match protox::compile(["proto/onnx.proto"], ["proto"]) {
        Ok(fds) => fds,
        Err(e) => {
            eprintln!("proto/onnx.proto does not compile: {e:?}");
            std::process::exit(1);
        }
    };
    let mut config = prost_build::Config::new();
    // Every `bytes` field becomes `bytes::Bytes`, so decoding from a memory map slices
    // the map instead of copying tensor payloads.
    config.bytes(["."]);
    if let Err(e) = config.compile_fds(fds) {
        eprintln!("prost-build failed on proto/onnx.proto: {e}");
        std::process::exit(1);
    }
}
