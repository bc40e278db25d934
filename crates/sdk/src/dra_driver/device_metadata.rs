//! Device metadata files (KEP-5304), as the Go helper writes them when a
//! driver turns them on: for each request of a prepared claim, a
//! `DeviceMetadata` object (`metadata.resource.k8s.io/v1beta1`) naming the
//! claim and the devices it got, with the attributes and network data the
//! driver gave, mounted read-only into the containers through a CDI spec of
//! kind `<driver>/metadata`:
//!
//! - the file:
//!   `<plugin dir>/dra-device-metadata/<namespace>_<claim>/<base request>/metadata.json`
//!   (mode 0644), a JSON stream of one object
//!   per line;
//! - the CDI spec: `<CDI dir>/<driver>_metadata_<claim uid>_<base
//!   request>.json`, one device `<claim uid>_<base request>` bind-mounting
//!   the file at `/var/run/kubernetes.io/dra-device-attributes/
//!   resourceclaims/<claim>/<base request>/<driver>-metadata.json` (under
//!   `resourceclaimtemplates/<pod claim name>` for a claim made from a
//!   template);
//! - its CDI id `<driver>/metadata=<claim uid>_<base request>` added to the
//!   first device of each request;
//! - all removed when the claim is unprepared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::claim::{ClaimRef, PreparedClaim, base_request};
use super::device_attribute::{DeviceAttribute, NetworkDeviceData};
use crate::cdi::{CDI_VERSION, write_atomically};
use crate::cdi::{CdiMount, ContainerEdits};

/// The API version of the objects written.
pub const DEVICE_METADATA_API_VERSION: &str = "metadata.resource.k8s.io/v1beta1";
/// Where the files are mounted in containers.
pub const DEVICE_METADATA_CONTAINER_DIR: &str = "/var/run/kubernetes.io/dra-device-attributes";
/// The directory of the files in the plugin directory.
const HOST_SUBDIR: &str = "dra-device-metadata";

/// The metadata files of one driver.
#[derive(Debug, Clone)]
pub(crate) struct MetadataFiles {
    driver: String,
    plugin_dir: PathBuf,
    cdi_dir: PathBuf,
}

impl MetadataFiles {
    pub(crate) fn new(driver: &str, plugin_dir: &Path, cdi_dir: &Path) -> Self {
        Self {
            driver: driver.to_string(),
            plugin_dir: plugin_dir.to_owned(),
            cdi_dir: cdi_dir.to_owned(),
        }
    }

    fn claim_dir(&self, claim: &ClaimRef) -> PathBuf {
        let name = format!("{}_{}", claim.namespace, claim.name);
        self.plugin_dir.join(HOST_SUBDIR).join(name)
    }

    /// The host file of `request` (a base request) of `claim`.
    pub(crate) fn file(&self, claim: &ClaimRef, request: &str) -> PathBuf {
        self.claim_dir(claim).join(request).join("metadata.json")
    }

    /// The CDI spec of `request` (a base request) of claim `uid`.
    pub(crate) fn cdi_spec(&self, uid: &str, request: &str) -> PathBuf {
        let name = format!("{}_metadata_{uid}_{request}.json", self.driver);
        self.cdi_dir.join(name)
    }

    /// Writes the files of `claim` (answered by the driver) and adds each
    /// request's CDI id to its first device. `pod_claim_name` is the pod's
    /// name for a claim made from a template.
    pub(crate) fn write(
        &self,
        claim: &mut PreparedClaim,
        pod_claim_name: Option<&str>,
    ) -> std::io::Result<()> {
        // Request (as allocated, perhaps a subrequest) → its devices.
        let mut requests: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (index, device) in claim.devices.iter().enumerate() {
            for request in &device.requests {
                requests.entry(request.clone()).or_default().push(index);
            }
        }
        let reference = &claim.claim;
        for (request, devices) in &requests {
            let base = base_request(request);
            let object = self.object(claim, pod_claim_name, request, devices);
            let mut stream = serde_json::to_vec(&object).map_err(std::io::Error::other)?;
            stream.push(b'\n');
            let file = self.file(reference, base);
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            write_atomically(&file, &stream)?;
            let id = self.write_cdi_spec(reference, pod_claim_name, base, &file)?;
            if let Some(first) = devices.first()
                && let Some(device) = claim.devices.get_mut(*first)
                && !device.cdi_device_ids.contains(&id)
            {
                device.cdi_device_ids.push(id);
            }
        }
        Ok(())
    }

    /// The `DeviceMetadata` of `request` of `claim`: its `devices`.
    fn object<'a>(
        &'a self,
        claim: &'a PreparedClaim,
        pod_claim_name: Option<&'a str>,
        request: &'a str,
        devices: &[usize],
    ) -> MetadataObject<'a> {
        let devices = devices
            .iter()
            .filter_map(|i| claim.devices.get(*i))
            .map(|d| {
                let metadata = d.metadata.as_ref();
                MetadataDevice {
                    driver: &self.driver,
                    pool: &d.pool,
                    name: &d.device,
                    attributes: metadata.map(|m| &m.attributes).filter(|a| !a.is_empty()),
                    network_data: metadata.and_then(|m| m.network_data.as_ref()),
                }
            })
            .collect();
        let reference = &claim.claim;
        MetadataObject {
            kind: "DeviceMetadata",
            api_version: DEVICE_METADATA_API_VERSION,
            metadata: ObjectMeta {
                name: &reference.name,
                namespace: &reference.namespace,
                uid: reference.uid.as_str(),
                generation: 1,
            },
            pod_claim_name,
            requests: [MetadataRequest {
                name: request,
                devices,
            }],
        }
    }

    /// Writes the CDI spec mounting `file` for `request` of `claim`: its
    /// CDI id.
    fn write_cdi_spec(
        &self,
        claim: &ClaimRef,
        pod_claim_name: Option<&str>,
        request: &str,
        file: &Path,
    ) -> std::io::Result<String> {
        let file_name = format!("{}-metadata.json", self.driver);
        let container_path = match pod_claim_name {
            Some(name) => format!(
                "{DEVICE_METADATA_CONTAINER_DIR}/resourceclaimtemplates/{name}/{request}/{file_name}"
            ),
            None => format!(
                "{DEVICE_METADATA_CONTAINER_DIR}/resourceclaims/{}/{request}/{file_name}",
                claim.name
            ),
        };
        let name = format!("{}_{request}", claim.uid);
        let kind = format!("{}/metadata", self.driver);
        let edits = ContainerEdits {
            mounts: vec![CdiMount {
                host_path: file.display().to_string(),
                container_path,
                options: vec!["ro".into(), "bind".into()],
            }],
            ..Default::default()
        };
        let spec = CdiSpec {
            cdi_version: CDI_VERSION,
            kind: &kind,
            devices: [CdiDevice {
                name: &name,
                container_edits: &edits,
            }],
        };
        let bytes = serde_json::to_vec_pretty(&spec).map_err(std::io::Error::other)?;
        std::fs::create_dir_all(&self.cdi_dir)?;
        write_atomically(&self.cdi_spec(claim.uid.as_str(), request), &bytes)?;
        Ok(format!("{kind}={name}"))
    }

    /// Removes the files of `claim`, if any.
    pub(crate) fn remove(&self, claim: &ClaimRef) -> std::io::Result<()> {
        match std::fs::remove_dir_all(self.claim_dir(claim)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let prefix = format!("{}_metadata_{}_", self.driver, claim.uid);
        let entries = match std::fs::read_dir(&self.cdi_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&prefix) && name.ends_with(".json") {
                match std::fs::remove_file(entry.path()) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// A `DeviceMetadata` file's object, one request's devices.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct MetadataObject<'a> {
    kind: &'static str,
    api_version: &'static str,
    metadata: ObjectMeta<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pod_claim_name: Option<&'a str>,
    requests: [MetadataRequest<'a>; 1],
}

/// The claim the file is of.
#[derive(serde::Serialize)]
struct ObjectMeta<'a> {
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
    generation: i64,
}

/// A request and its devices.
#[derive(serde::Serialize)]
struct MetadataRequest<'a> {
    name: &'a str,
    devices: Vec<MetadataDevice<'a>>,
}

/// One device, with what the driver told of it.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct MetadataDevice<'a> {
    driver: &'a str,
    pool: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    attributes: Option<&'a BTreeMap<String, DeviceAttribute>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    network_data: Option<&'a NetworkDeviceData>,
}

/// The CDI spec mounting one request's file.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct CdiSpec<'a> {
    cdi_version: &'static str,
    kind: &'a str,
    devices: [CdiDevice<'a>; 1],
}

/// The spec's one device.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct CdiDevice<'a> {
    name: &'a str,
    container_edits: &'a ContainerEdits,
}
