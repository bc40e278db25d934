//! The packaging files describe an agent that starts: the systemd unit's
//! ExecStart and the container image's command parse, with the packaged
//! config file, into the settings they mean.

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

fn packaging() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../packaging")
}

/// Runs the command line `args` (without the binary) with `--print-config`,
/// the config path pointing at the packaged file.
fn print_config(args: &[String]) -> String {
    let config = packaging().join("nodeplugins.toml");
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            if a == "/etc/nodeplugins/nodeplugins.toml" {
                config.display().to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeplugins"))
        .args(&args)
        .arg("--print-config")
        .env_remove("NODEPLUGINS_METRICS_ADDR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_systemd_unit_runs_the_agent_with_the_packaged_config() {
    let unit = std::fs::read_to_string(packaging().join("systemd/nodeplugins.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let mut words = exec.split_whitespace().map(String::from);
    assert_eq!(words.next().unwrap(), "/usr/local/bin/nodeplugins");
    let args: Vec<String> = words.collect();
    assert_eq!(args[0], "run");
    let settings = print_config(&args);
    assert!(
        settings.contains("root_dir = \"/var/lib/kubelet\""),
        "{settings}"
    );
    assert!(settings.contains("log_format = \"json\""), "{settings}");
    assert!(
        settings.contains("metrics_addr = \"127.0.0.1:10261\""),
        "{settings}"
    );
}

#[test]
fn the_container_image_command_runs_the_agent_with_the_packaged_config() {
    let file = std::fs::read_to_string(packaging().join("Containerfile")).unwrap();
    let cmd = file.lines().find_map(|l| l.strip_prefix("CMD ")).unwrap();
    let args: Vec<String> = serde_json::from_str(cmd).unwrap();
    let settings = print_config(&args);
    assert!(
        settings.contains("dra_cleanup_grace = \"30s\""),
        "{settings}"
    );
    // Every binary the image copies is one the workspace builds.
    for name in [
        "nodeplugins",
        "nodeplugins-csi-registrar",
        "example-csi-driver",
        "example-device-plugin",
        "example-dra-driver",
    ] {
        assert!(file.contains(&format!("target/release/{name}")), "{name}");
    }
}
