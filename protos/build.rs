//! Compiles the .proto files with protox (pure Rust), so no system `protoc` is needed.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/ferry/v1/registry.proto",
        "proto/ferry/v1/expr.proto",
        "proto/ferry/v1/vector.proto",
        "proto/ferry/v1/reader.proto",
        "proto/ferry/v1/signed.proto",
        "proto/ferry/v1/feast_layout.proto",
        "proto/ferry/v1/log.proto",
        "proto/ferry/feast/feast.proto",
        "proto/ferry/feast/registry_server.proto",
        "proto/ferry/feast/precomputed.proto",
        "proto/inference/predict_v2.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    // Ordered maps: a rewritten ModelInferRequest encodes its parameters the same way every time.
    prost_build::Config::new()
        .btree_map([".inference"])
        .compile_fds(fds)?;
    Ok(())
}
