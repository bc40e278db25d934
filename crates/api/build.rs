//! Compiles the `.proto` files under `proto/` with protox (a Rust protobuf
//! compiler), so building needs no system `protoc`.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "pluginregistration/v1/api.proto",
    "deviceplugin/v1beta1/api.proto",
    "dra/v1/api.proto",
    "dra/v1beta1/api.proto",
    "dra_health/v1alpha1/api.proto",
    "dra_health/v1/api.proto",
    "csi/v1/csi.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    let files: Vec<PathBuf> = PROTOS.iter().map(|p| root.join(p)).collect();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let descriptors = protox::compile(&files, [&root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
