//! The Go programs of `interop/`: the kubelet's own plugin manager, DRA
//! plugin manager and device-plugin server, its example plugins and stubs,
//! the end-to-end suite's CSI mock driver, a DRA driver on the official Go
//! helper, the kubelet's DRA manager, DNS configurer and static pod file source, etcd,
//! kube-apiserver, kube-scheduler and kube-controller-manager, all built
//! from the Kubernetes Go modules pinned in `interop/go.mod`; and the
//! container runtime, containerd with its `ctr` client and runc shim, from
//! the module of its own in `interop/containerd/`; and the metrics server,
//! from its own module in `interop/metrics-server/`.
//!
//! `scripts/test` builds them before the tests; a test that finds one
//! missing or stale builds it here (`go build` is a no-op when up to date).
//! Test processes run in parallel, so the build is serialized across them
//! by an exclusive lock on `interop/bin/.build.lock`.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Every program `interop/` builds, by name under `interop/bin/`.
pub const PROGRAMS: &[&str] = &[
    "kubelet-plugins",
    "example-plugins",
    "stub-device-plugin",
    "sample-device-plugin",
    "dra-driver",
    "gpu-driver",
    "podresources-client",
    "kubelet-dra",
    "kubelet-pods",
    "kubelet-dns",
    "kubelet-static-pods",
    "csi-mock",
    "podcert-signer",
    "etcd",
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
    "kubectl",
    "kubelet",
    "containerd",
    "ctr",
    "containerd-shim-runc-v2",
    "metrics-server",
];

/// The programs built from the Kubernetes module rather than from
/// `interop/cmd/<name>`, with their packages.
const KUBERNETES_PACKAGES: &[(&str, &str)] = &[
    ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
    ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
    (
        "kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
    ),
    // The client of the kubelet's API: logs, exec, attach, port-forward.
    ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
    // The real kubelet, the oracle for what a pod's containers get.
    ("kubelet", "k8s.io/kubernetes/cmd/kubelet"),
    // The device plugin the kubelet's own e2e tests run.
    (
        "sample-device-plugin",
        "k8s.io/kubernetes/test/images/sample-device-plugin",
    ),
];

/// The programs built in `interop/containerd/`, a module of its own, with
/// their packages.
const CONTAINERD_PACKAGES: &[(&str, &str)] = &[
    (
        "containerd",
        "github.com/containerd/containerd/v2/cmd/containerd",
    ),
    ("ctr", "github.com/containerd/containerd/v2/cmd/ctr"),
    (
        "containerd-shim-runc-v2",
        "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
    ),
];

/// The programs built in `interop/metrics-server/`, a module of its own,
/// with their packages.
const METRICS_SERVER_PACKAGES: &[(&str, &str)] = &[(
    "metrics-server",
    "sigs.k8s.io/metrics-server/cmd/metrics-server",
)];

/// The linker flags `scripts/build-interop` builds with: the same, so that
/// `go build` finds its binaries up to date.
const LDFLAGS: &str = "-ldflags=-s -w";

/// The `interop/` directory of the repository.
pub fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../interop")
        .canonicalize()
        .expect("interop/ next to crates/")
}

/// The path of `interop/bin/<name>`, built first if missing or stale.
pub fn go_program(name: &str) -> PathBuf {
    assert!(PROGRAMS.contains(&name), "unknown interop program {name}");
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let dir = interop_dir();
    let path = dir.join("bin").join(name);
    if !built.iter().any(|b| b == name) {
        build(&dir, name);
        built.push(name.to_string());
    }
    assert!(path.exists(), "{} was not built", path.display());
    path
}

fn build(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir.join("bin")).expect("create interop/bin");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("bin/.build.lock"))
        .expect("open interop/bin/.build.lock");
    // Released when `lock` is dropped at the end of this function.
    lock.lock().expect("lock interop/bin/.build.lock");
    let of = |packages: &[(&str, &'static str)]| {
        packages
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, package)| (*package).to_string())
    };
    let (module, package) = if let Some(package) = of(KUBERNETES_PACKAGES) {
        (dir.to_path_buf(), package)
    } else if let Some(package) = of(CONTAINERD_PACKAGES) {
        (dir.join("containerd"), package)
    } else if let Some(package) = of(METRICS_SERVER_PACKAGES) {
        (dir.join("metrics-server"), package)
    } else {
        (dir.to_path_buf(), format!("./cmd/{name}"))
    };
    let status = Command::new("go")
        .current_dir(&module)
        .args(["build", LDFLAGS, "-o"])
        .arg(dir.join("bin").join(name))
        .arg(&package)
        .status()
        .unwrap_or_else(|e| panic!("run `go build {package}` (is Go installed?): {e}"));
    assert!(status.success(), "go build {package} in interop/ failed");
}
