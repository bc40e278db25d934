//! `azureFile` → `file.csi.azure.com`: the handle is
//! `<resource group>#<account>#<share>#<volume>#<secret namespace>`, the
//! account read from the secret's name (`azure-storage-account-<account>-secret`,
//! else the name itself), the secret the stage call's.

use k8s_openapi::api::core::v1::{
    AzureFilePersistentVolumeSource, AzureFileVolumeSource, CSIPersistentVolumeSource,
    PersistentVolume, SecretReference,
};

use super::inline_pv::csi_pv;

/// The CSI driver.
pub(crate) const DRIVER: &str = "file.csi.azure.com";
/// The annotation of a PersistentVolume naming its resource group.
const RESOURCE_GROUP_ANNOTATION: &str = "kubernetes.io/azure-file-resource-group";

/// The CSI source of a share.
fn csi(
    handle: String,
    share: &str,
    read_only: Option<bool>,
    secret: SecretReference,
) -> CSIPersistentVolumeSource {
    CSIPersistentVolumeSource {
        driver: DRIVER.to_string(),
        volume_handle: handle,
        read_only: read_only.filter(|r| *r),
        volume_attributes: Some([("sharename".to_string(), share.to_string())].into()),
        node_stage_secret_ref: Some(secret),
        ..Default::default()
    }
}

/// A pod's inline volume `name` in `namespace`, as a volume of the driver.
pub(crate) fn inline(
    source: &AzureFileVolumeSource,
    name: &str,
    namespace: &str,
) -> PersistentVolume {
    let namespace = if namespace.is_empty() {
        "default"
    } else {
        namespace
    };
    let handle = format!(
        "#{}#{}#{name}#{namespace}",
        account(&source.secret_name),
        source.share_name
    );
    let secret = SecretReference {
        name: Some(source.secret_name.clone()),
        namespace: Some(namespace.to_string()),
    };
    let csi = csi(handle.clone(), &source.share_name, source.read_only, secret);
    csi_pv(handle, csi, &["ReadWriteMany"])
}

/// A PersistentVolume of the plugin, as one of the driver.
pub(crate) fn persistent(mut pv: PersistentVolume) -> Result<PersistentVolume, String> {
    let name = pv.metadata.name.clone().unwrap_or_default();
    let group = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESOURCE_GROUP_ANNOTATION))
        .cloned()
        .unwrap_or_default();
    let spec = pv.spec.get_or_insert_with(Default::default);
    let Some(source): Option<AzureFilePersistentVolumeSource> = spec.azure_file.take() else {
        return Err("pv is nil or Azure File source not defined on pv".to_string());
    };
    let namespace = match &source.secret_namespace {
        Some(namespace) => namespace.clone(),
        None => spec
            .claim_ref
            .as_ref()
            .and_then(|c| c.namespace.clone())
            .unwrap_or_default(),
    };
    if namespace.is_empty() {
        return Err(
            "could not find a secret namespace in PersistentVolumeSource or ClaimRef".to_string(),
        );
    }
    let handle = format!(
        "{group}#{}#{}#{name}#{namespace}",
        account(&source.secret_name),
        source.share_name
    );
    let secret = SecretReference {
        name: Some(source.secret_name.clone()),
        namespace: Some(namespace),
    };
    spec.csi = Some(csi(handle, &source.share_name, source.read_only, secret));
    Ok(pv)
}

/// The storage account a secret's name gives: what stands between
/// `azure-storage-account-` and the last `-secret` after it, else the name.
fn account(secret: &str) -> &str {
    const PREFIX: &str = "azure-storage-account-";
    const SUFFIX: &str = "-secret";
    let Some(start) = secret.find(PREFIX).map(|at| at + PREFIX.len()) else {
        return secret;
    };
    match secret[start..].rfind(SUFFIX) {
        Some(end) if end > 0 => &secret[start..start + end],
        _ => secret,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_is_read_from_the_secrets_name() {
        assert_eq!(account("azure-storage-account-acct-secret"), "acct");
        assert_eq!(
            account("x-azure-storage-account-a-b-secret-secret"),
            "a-b-secret"
        );
        assert_eq!(
            account("azure-storage-account--secret"),
            "azure-storage-account--secret"
        );
        assert_eq!(account("mine"), "mine");
    }
}
