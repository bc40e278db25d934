//! Container images made here, for a runtime that can reach no registry:
//! an OCI image layout archive (one uncompressed layer with Debian's static
//! busybox and a link per applet) holding two images of that layer,
//! [`BUSYBOX`] (runs `sh`) and [`PAUSE`] (the pod sandbox image: it
//! sleeps forever, since a sandbox whose process exits is made again).
//! `ctr images import` takes the archive.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;
use sha2::{Digest, Sha256};

/// The image containers run.
pub const BUSYBOX: &str = "nodeplugins.local/busybox:1";
/// The sandbox ("pause") image.
pub const PAUSE: &str = "nodeplugins.local/pause:1";
/// Where Debian's `busybox-static` puts the program.
pub const BUSYBOX_PROGRAM: &str = "/bin/busybox";

/// Writes the archive holding [`BUSYBOX`] and [`PAUSE`] to `path`.
pub fn write_archive(path: &Path) -> anyhow::Result<()> {
    std::fs::write(path, archive_bytes()?)?;
    Ok(())
}

/// The archive's bytes: the same for the same busybox, since every header
/// is written with fixed times and owners.
fn archive_bytes() -> anyhow::Result<Vec<u8>> {
    let layer = busybox_layer()?;
    let layer_digest = sha256(&layer);
    let mut blobs: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut manifests = Vec::new();
    for (name, cmd) in [
        (BUSYBOX, json!(["sh"])),
        (PAUSE, json!(["sleep", "2147483647"])),
    ] {
        let config = serde_json::to_vec(&json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/bin"], "Cmd": cmd, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }))?;
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": sha256(&config),
                "size": config.len(),
            },
            "layers": [{
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": layer.len(),
            }],
        }))?;
        manifests.push(json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha256(&manifest),
            "size": manifest.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": name,
            },
        }));
        blobs.insert(sha256(&config), config);
        blobs.insert(sha256(&manifest), manifest);
    }
    blobs.insert(layer_digest, layer);
    let index = json!({"schemaVersion": 2, "manifests": manifests});

    let mut archive = tar::Builder::new(Vec::new());
    append(
        &mut archive,
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    append(&mut archive, "index.json", &serde_json::to_vec(&index)?)?;
    for (digest, blob) in &blobs {
        let hex = digest.trim_start_matches("sha256:");
        append(&mut archive, &format!("blobs/sha256/{hex}"), blob)?;
    }
    Ok(archive.into_inner()?)
}

/// The layer: `/bin/busybox`, a link per applet, and the directories a
/// container's mounts need.
fn busybox_layer() -> anyhow::Result<Vec<u8>> {
    let program = std::fs::read(BUSYBOX_PROGRAM).map_err(|e| {
        anyhow::anyhow!(
            "{BUSYBOX_PROGRAM}: {e} (Debian's busybox-static; scripts/install-runtime-deps)"
        )
    })?;
    let applets = std::process::Command::new(BUSYBOX_PROGRAM)
        .arg("--list")
        .output()?;
    let mut layer = tar::Builder::new(Vec::new());
    for dir in ["bin", "dev", "etc", "proc", "sys", "tmp", "var", "run"] {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(if dir == "tmp" { 0o1777 } else { 0o755 });
        header.set_size(0);
        layer.append_data(&mut header, format!("{dir}/"), std::io::empty())?;
    }
    let mut header = tar::Header::new_ustar();
    header.set_mode(0o755);
    header.set_size(program.len() as u64);
    layer.append_data(&mut header, "bin/busybox", program.as_slice())?;
    for applet in String::from_utf8(applets.stdout)?.lines() {
        let applet = applet.trim();
        if applet.is_empty() || applet == "busybox" {
            continue;
        }
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_mode(0o777);
        header.set_size(0);
        layer.append_link(&mut header, format!("bin/{applet}"), "busybox")?;
    }
    Ok(layer.into_inner()?)
}

fn append(archive: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) -> anyhow::Result<()> {
    let mut header = tar::Header::new_ustar();
    header.set_mode(0o644);
    header.set_size(data.len() as u64);
    archive.append_data(&mut header, name, data)?;
    Ok(())
}

fn sha256(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The archive under the system's temporary directory, named by its
/// digest: every test process uses the one file (written whole, then
/// renamed into place) instead of leaving one behind per process.
pub fn archive() -> PathBuf {
    static WRITTEN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    WRITTEN
        .get_or_init(|| {
            let bytes = archive_bytes().expect("build the image archive");
            let digest = sha256(&bytes);
            let hex = digest.trim_start_matches("sha256:");
            let path = std::env::temp_dir().join(format!("nodeplugins-images-{}.tar", &hex[..16]));
            if std::fs::read(&path).is_ok_and(|held| held == bytes) {
                return path;
            }
            let partial = path.with_extension(format!("tar.{}", std::process::id()));
            std::fs::write(&partial, &bytes).expect("write the image archive");
            std::fs::rename(&partial, &path).expect("move the image archive into place");
            path
        })
        .clone()
}
