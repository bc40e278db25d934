//! Compiles the `.proto` files under `proto/` with protox (a Rust protobuf
//! compiler), so building needs no system `protoc`.

use std::path::{Path, PathBuf};

const PROTOS: &[&str] = &[
    "pluginregistration/v1/api.proto",
    "deviceplugin/v1beta1/api.proto",
    "dra/v1/api.proto",
    "dra/v1beta1/api.proto",
    "dra_health/v1alpha1/api.proto",
    "dra_health/v1/api.proto",
    "csi/v1/csi.proto",
    "cri/v1/api.proto",
];

/// Compiled apart, into `OUT_DIR/podresources/`: their proto packages (`v1`,
/// `v1alpha1`) are also those of the DRA health APIs, and the generated code
/// is one file per package.
const POD_RESOURCES_PROTOS: &[&str] = &[
    "podresources/v1/api.proto",
    "podresources/v1alpha1/api.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    compile(&root, PROTOS, &out)?;
    let pod_resources = out.join("podresources");
    std::fs::create_dir_all(&pod_resources)?;
    compile(&root, POD_RESOURCES_PROTOS, &pod_resources)?;
    Ok(())
}

fn compile(root: &Path, protos: &[&str], out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let files: Vec<PathBuf> = protos.iter().map(|p| root.join(p)).collect();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let descriptors = protox::compile(&files, [root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .out_dir(out)
        .compile_fds(descriptors)?;
    Ok(())
}
