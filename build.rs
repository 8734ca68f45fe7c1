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
    // An attribute holds at most one of these; inline, they made every AttributeProto 1.7 KB
    // (a Conv's four attributes: 6.7 KB per node in the IR and again in the export). Boxed,
    // an attribute is about 330 bytes. The encoding is the same.
    config.boxed(".onnx.AttributeProto.t");
    config.boxed(".onnx.AttributeProto.g");
    config.boxed(".onnx.AttributeProto.sparse_tensor");
    config.boxed(".onnx.AttributeProto.tp");
    if let Err(e) = config.compile_fds(fds) {
        eprintln!("prost-build failed on proto/onnx.proto: {e}");
        std::process::exit(1);
    }
}
