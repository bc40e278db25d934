//! The Python grpcio environment the interop tests use: a venv under the
//! target directory with grpcio, grpcio-tools, h2 and hpack, and Python stubs
//! generated from our own `.proto` files. Created on first use (under a file
//! lock, since test processes run in parallel) and reused while the
//! requirements, protos and scripts are unchanged.

use std::collections::hash_map::DefaultHasher;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::sync::OnceLock;

use anyhow::{Context, bail};

/// A ready Python environment.
#[derive(Debug)]
pub struct PythonEnv {
    python: PathBuf,
    stubs: PathBuf,
    scripts: PathBuf,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

fn proto_dir() -> PathBuf {
    workspace_root().join("crates/api/proto")
}

fn proto_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![proto_dir()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read proto dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "proto") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn fingerprint(requirements: &Path) -> String {
    let mut hasher = DefaultHasher::new();
    std::fs::read(requirements)
        .unwrap_or_default()
        .hash(&mut hasher);
    for file in proto_files() {
        file.hash(&mut hasher);
        std::fs::read(&file).unwrap_or_default().hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

fn run(command: &mut StdCommand, what: &str) -> anyhow::Result<()> {
    let output = command.output().with_context(|| format!("run {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

fn setup() -> anyhow::Result<PythonEnv> {
    let base = target_dir().join("interop");
    std::fs::create_dir_all(&base)?;
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let requirements = scripts.join("requirements.txt");
    let venv = base.join("venv");
    let stubs = base.join("stubs");
    let env = PythonEnv {
        python: venv.join("bin/python"),
        stubs: stubs.clone(),
        scripts,
    };

    let lock = File::create(base.join(".lock"))?;
    lock.lock()?;
    let marker = base.join("ready");
    let want = fingerprint(&requirements);
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(want.as_str())
        && env.python.exists()
    {
        return Ok(env);
    }
    let _ = std::fs::remove_file(&marker);
    if !env.python.exists() {
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
        run(
            StdCommand::new(python).args(["-m", "venv"]).arg(&venv),
            "python3 -m venv",
        )?;
    }
    run(
        StdCommand::new(&env.python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements),
        "pip install -r requirements.txt",
    )?;
    let _ = std::fs::remove_dir_all(&stubs);
    std::fs::create_dir_all(&stubs)?;
    let mut protoc = StdCommand::new(&env.python);
    protoc
        .args(["-m", "grpc_tools.protoc"])
        .arg(format!("-I{}", proto_dir().display()))
        .arg(format!("--python_out={}", stubs.display()))
        .arg(format!("--grpc_python_out={}", stubs.display()));
    for file in proto_files() {
        protoc.arg(file);
    }
    run(&mut protoc, "grpc_tools.protoc")?;
    std::fs::write(&marker, want)?;
    Ok(env)
}

/// The shared environment, created on first use.
pub fn python_env() -> &'static PythonEnv {
    static ENV: OnceLock<PythonEnv> = OnceLock::new();
    ENV.get_or_init(|| setup().unwrap_or_else(|e| panic!("Python interop environment: {e:#}")))
}

impl PythonEnv {
    /// A command running one of the scripts in `crates/test-support/python`,
    /// with the generated stubs importable and output unbuffered.
    pub fn script(&self, name: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.python);
        command
            .arg(self.scripts.join(name))
            .env("PYTHONPATH", &self.stubs)
            .env("PYTHONUNBUFFERED", "1");
        command
    }
}
