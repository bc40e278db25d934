//! A hundred claims through our agent's DRA manager (its checkpoint on
//! disk) and a real driver process, one after another and all at once: the
//! wall time of the prepares and of the unprepares, and the fsyncs of every
//! process during each (`perf stat -a` on the syscall tracepoints; the
//! machine is otherwise idle). Two drivers:
//!
//! - **our SDK's `example-dra-driver`**: its record of prepared claims and a
//!   CDI spec per claim on disk, calls serialized (the default), so the
//!   calls that arrive while one runs are served in one batch;
//! - **the Go helper's driver** (`interop/bin/dra-driver`,
//!   `k8s.io/dynamic-resource-allocation/kubeletplugin`, calls serialized):
//!   it keeps no record of its own and writes no file.
//!
//! Run: `cargo bench -p nodeplugins-cli --bench dra_claims` (perf needs
//! root for the tracepoints; without it the fsyncs read `-`).

// Benchmark code: a failed unwrap aborts the run with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nodeplugins::dra::{ClaimRef, DraHandle, DraManager, DraManagerConfig, LoggingCleanup};
use nodeplugins::event::EventKind;
use nodeplugins_api::constants::dra_service;
use nodeplugins_test_support::binaries::binary;
use nodeplugins_test_support::go_process::GoProcess;
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::wait::TIMEOUT;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const CLAIMS: usize = 100;

fn claim(i: usize) -> ClaimRef {
    ClaimRef {
        namespace: "default".into(),
        name: format!("claim-{i}"),
        uid: format!("uid-{i}"),
    }
}

/// Counts fsync and fdatasync calls of every process from the moment
/// [`Fsyncs::start`] returns until [`Fsyncs::stop`]: `perf stat -a` printing
/// its counts every 100 ms, summed as they come.
struct Fsyncs(Option<(tokio::process::Child, tokio::task::JoinHandle<u64>)>);

impl Fsyncs {
    /// Starts counting; returns once perf has printed its first interval
    /// (it counts from then on), or at once without perf.
    async fn start() -> Self {
        let child = Command::new("perf")
            .args(["stat", "-a", "-I", "100", "-x,", "-e"])
            .arg("syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            return Self(None);
        };
        let Some(stderr) = child.stderr.take() else {
            return Self(None);
        };
        let (counting, started) = tokio::sync::oneshot::channel();
        let sum = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut counting = Some(counting);
            let mut total = 0;
            while let Ok(Some(line)) = lines.next_line().await {
                let count = line
                    .split(',')
                    .nth(1)
                    .and_then(|c| c.trim().parse::<u64>().ok());
                if let Some(count) = count {
                    total += count;
                    if let Some(counting) = counting.take() {
                        let _ = counting.send(());
                    }
                }
            }
            total
        });
        if started.await.is_err() {
            return Self(None);
        }
        Self(Some((child, sum)))
    }

    async fn stop(self) -> String {
        let Some((mut child, sum)) = self.0 else {
            return "-".into();
        };
        if let Some(pid) = child.id() {
            let _ = Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status()
                .await;
        }
        let _ = child.wait().await;
        sum.await
            .map_or_else(|_| "-".into(), |total| total.to_string())
    }
}

/// One phase's figures.
struct Phase {
    prepare: Duration,
    prepare_fsyncs: String,
    unprepare: Duration,
    unprepare_fsyncs: String,
}

/// One claim's call: its error, if any.
async fn call(manager: &DraHandle, driver: &str, i: usize, unprepare: bool) -> Option<String> {
    if unprepare {
        let result = manager.unprepare(driver, &[claim(i)]).await.unwrap();
        result[0].error.clone()
    } else {
        let result = manager.prepare(driver, &[claim(i)]).await.unwrap();
        result[0].error.clone()
    }
}

/// Prepares (or unprepares) claims `range`, one after another or all at
/// once: the wall time and the fsyncs meanwhile.
async fn calls(
    manager: &DraHandle,
    driver: &str,
    range: std::ops::Range<usize>,
    at_once: bool,
    unprepare: bool,
) -> (Duration, String) {
    let fsyncs = Fsyncs::start().await;
    let start = Instant::now();
    if at_once {
        let all = range.map(|i| call(manager, driver, i, unprepare));
        for error in futures::future::join_all(all).await {
            assert_eq!(error, None);
        }
    } else {
        for i in range {
            assert_eq!(call(manager, driver, i, unprepare).await, None);
        }
    }
    let took = start.elapsed();
    (took, fsyncs.stop().await)
}

/// Prepares and unprepares claims `range`, one after another or all at once.
async fn phase(
    manager: &DraHandle,
    driver: &str,
    range: std::ops::Range<usize>,
    at_once: bool,
) -> Phase {
    let (prepare, prepare_fsyncs) = calls(manager, driver, range.clone(), at_once, false).await;
    let (unprepare, unprepare_fsyncs) = calls(manager, driver, range, at_once, true).await;
    Phase {
        prepare,
        prepare_fsyncs,
        unprepare,
        unprepare_fsyncs,
    }
}

/// Our agent's DRA manager with its checkpoint in `dir`, `driver`
/// registered at `endpoint` and connected.
async fn agent(dir: &Path, driver: &str, endpoint: &Path) -> (DraHandle, CancellationToken) {
    let config = DraManagerConfig {
        state_dir: Some(dir.join("agent")),
        ..Default::default()
    };
    let (dra, manager) = DraManager::new(config, Arc::new(LoggingCleanup));
    let mut events = manager.events();
    let shutdown = CancellationToken::new();
    tokio::spawn(dra.run(shutdown.clone()));
    let deadline = Instant::now() + TIMEOUT;
    while !endpoint.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never served",
            endpoint.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    manager
        .register(
            driver,
            &endpoint.display().to_string(),
            &[dra_service::V1.to_string()],
        )
        .await
        .unwrap();
    loop {
        if events.recv().await.unwrap().kind == EventKind::Connected {
            break;
        }
    }
    (manager, shutdown)
}

fn report(driver: &str, mode: &str, p: &Phase) {
    println!(
        "{driver:<22} {mode:<18} prepare {:>8.1} ms ({:>4} fsyncs)  unprepare {:>8.1} ms ({:>4} fsyncs)",
        p.prepare.as_secs_f64() * 1000.0,
        p.prepare_fsyncs,
        p.unprepare.as_secs_f64() * 1000.0,
        p.unprepare_fsyncs,
    );
}

async fn run() {
    println!(
        "{CLAIMS} claims, one per call, through the agent's DRA manager (checkpoint on disk):"
    );

    // Our SDK's example driver.
    let dir = tempfile::tempdir().unwrap();
    let driver = "dra.example.com";
    let mut command = Command::new(binary("nodeplugins-sdk-bins", "example-dra-driver"));
    command
        .arg("--root-dir")
        .arg(dir.path())
        .arg("--cdi-dir")
        .arg(dir.path().join("cdi"))
        .args(["--devices", &CLAIMS.to_string(), "--no-health"]);
    let _ours = ChildProcess::spawn("example-dra-driver", command);
    let endpoint = dir.path().join(format!("plugins/{driver}/dra.sock"));
    let (manager, shutdown) = agent(dir.path(), driver, &endpoint).await;
    let serial = phase(&manager, driver, 0..CLAIMS, false).await;
    report("SDK example driver", "one after another", &serial);
    let batch = phase(&manager, driver, CLAIMS..2 * CLAIMS, true).await;
    report("SDK example driver", "all at once", &batch);
    println!(
        "  at once: prepare {:.1}x, unprepare {:.1}x faster than one after another",
        serial.prepare.as_secs_f64() / batch.prepare.as_secs_f64(),
        serial.unprepare.as_secs_f64() / batch.unprepare.as_secs_f64(),
    );
    shutdown.cancel();

    // The Go helper's driver, with the same claims in its fake clientset.
    let dir = tempfile::tempdir().unwrap();
    let driver = "gpu.go.example.com";
    let plugin_dir = dir.path().join(format!("plugins/{driver}"));
    std::fs::create_dir_all(dir.path().join("plugins_registry")).unwrap();
    let claims: Vec<String> = (0..2 * CLAIMS)
        .map(|i| {
            let c = claim(i);
            format!("{}/{}/{}", c.namespace, c.name, c.uid)
        })
        .collect();
    let mut go = GoProcess::start(
        "dra-driver",
        [
            "--registry-dir".to_string(),
            dir.path().join("plugins_registry").display().to_string(),
            "--plugin-dir".to_string(),
            plugin_dir.display().to_string(),
            "--devices".to_string(),
            (2 * CLAIMS).to_string(),
            "--claims".to_string(),
            claims.join(","),
        ],
    );
    go.event(TIMEOUT, "serving", |_| true).await;
    let (manager, shutdown) = agent(dir.path(), driver, &plugin_dir.join("dra.sock")).await;
    let serial = phase(&manager, driver, 0..CLAIMS, false).await;
    report("Go helper driver", "one after another", &serial);
    let batch = phase(&manager, driver, CLAIMS..2 * CLAIMS, true).await;
    report("Go helper driver", "all at once", &batch);
    println!(
        "  at once: prepare {:.1}x, unprepare {:.1}x faster than one after another",
        serial.prepare.as_secs_f64() / batch.prepare.as_secs_f64(),
        serial.unprepare.as_secs_f64() / batch.unprepare.as_secs_f64(),
    );
    shutdown.cancel();
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}
