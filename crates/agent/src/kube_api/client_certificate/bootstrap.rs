//! TLS bootstrap as the kubelet does it at start (`LoadClientCert`): when
//! the kubeconfig is missing, unreadable, or any of its client
//! certificates has expired, the node's certificate is asked for with the
//! bootstrap kubeconfig's credentials and the kubeconfig written to name
//! it.
//!
//! Without rotation (the kubelet's `LoadClientCert`), the key is the one
//! the current certificate has, else the one a bootstrap cut short left in
//! `kubelet-client.key.tmp`, else a new one written there first: asking
//! again after a restart makes the same request, whose name is the digest
//! of the key, and finds it. With rotation (the kubelet's certificate
//! manager asks for the first certificate as for every later one), a new
//! key and a request the API server names (`csr-...`). The API server's
//! `/healthz` is waited for up to a minute (every 2 s, jittered), the
//! request up to an hour. The certificate goes to the store, the key file
//! is removed, and the kubeconfig is written with the bootstrap file's
//! server and CA (its file, or its data), its `insecure-skip-tls-verify`,
//! and the store's `kubelet-client-current.pem` as client certificate and
//! key; its context is `default-context`, namespace `default`.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine;
use kube::config::Kubeconfig;

use crate::kube_api::client_certificate::certificate::certificates;
use crate::kube_api::client_certificate::config::ClientCertificates;
use crate::kube_api::client_certificate::error::ClientCertificateError;
use crate::kube_api::client_certificate::signing_request::{
    self, NodeRequest, request_certificate, wait_for_certificate,
};
use crate::kube_api::client_certificate::store::CertificateStore;

/// Where a bootstrap keeps its key until the certificate is stored.
const TMP_PRIVATE_KEY_FILE: &str = "kubelet-client.key.tmp";
/// How long the API server's health is waited for.
const SERVER_WAIT: Duration = Duration::from_secs(60);
/// How long a bootstrap request is waited for.
const BOOTSTRAP_WAIT: Duration = Duration::from_secs(3600);

/// Bootstraps the node's client certificate when `kubeconfig` has no
/// valid one and `certs` names a bootstrap kubeconfig; without one, or
/// with a valid kubeconfig, does nothing.
pub(crate) async fn load_client_cert(
    kubeconfig: &Path,
    certs: &ClientCertificates,
    node: &str,
) -> Result<(), ClientCertificateError> {
    let Some(bootstrap) = &certs.bootstrap_kubeconfig else {
        return Ok(());
    };
    if still_valid(kubeconfig) {
        tracing::info!(path = %kubeconfig.display(), "kubeconfig exists and is valid, skipping bootstrap");
        return Ok(());
    }
    tracing::info!(
        bootstrap = %bootstrap.display(),
        "using the bootstrap kubeconfig to ask for the node's client certificate and write the kubeconfig"
    );
    let bootstrap_config = read_kubeconfig(bootstrap)?;
    let client = client_of(bootstrap, bootstrap_config.clone()).await?;
    let store = CertificateStore::new(&certs.cert_dir);
    let existing = store.current().ok().flatten().map(|s| s.pem);
    let key_file = certs.cert_dir.join(TMP_PRIVATE_KEY_FILE);
    let left = std::fs::read(&key_file).ok();
    // With rotation, the certificate manager's way: a new key each time.
    let key_source = if certs.rotate {
        None
    } else {
        existing.or(left)
    };
    let made = NodeRequest::make(node, key_source).await?;
    if !certs.rotate {
        write_private(&key_file, &made.key.key_pem)?;
    }

    wait_for_server(&client).await;
    let asked = made.asked();
    let name = (!certs.rotate).then(|| signing_request::digested_name(&asked));
    let (name, uid) = request_certificate(&client, &asked, name.as_deref()).await?;
    tracing::info!(csr = %name, "waiting for the client certificate to be issued");
    let cert = wait_for_certificate(&client, &name, &uid, BOOTSTRAP_WAIT).await?;
    store.update(&cert, &made.key.key_pem)?;
    if let Err(e) = std::fs::remove_file(&key_file)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %key_file.display(), error = %e, "failed cleaning up the private key file");
    }
    write_kubeconfig(&bootstrap_config, kubeconfig, &store.current_path())?;
    tracing::info!(kubeconfig = %kubeconfig.display(), csr = %name, "client certificate issued, kubeconfig written");
    Ok(())
}

/// Whether `kubeconfig` exists and every client certificate it gives is
/// readable and not expired (the kubelet's `isClientConfigStillValid`).
pub(crate) fn still_valid(kubeconfig: &Path) -> bool {
    if !kubeconfig.exists() {
        return false;
    }
    let reason = match client_certificate_pem(kubeconfig) {
        Ok(pem) => match certificates(&pem) {
            Ok(certs) => match certs.iter().find(|c| SystemTime::now() > c.not_after) {
                None => return true,
                Some(_) => "part of its client certificate is expired".to_string(),
            },
            Err(e) => format!("unable to read its TLS certificates: {e}"),
        },
        Err(e) => e,
    };
    tracing::warn!(path = %kubeconfig.display(), %reason, "the kubeconfig is not valid");
    false
}

/// The client certificate (PEM) of `kubeconfig`'s current user.
fn client_certificate_pem(kubeconfig: &Path) -> Result<String, String> {
    let config = Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let user = current_user(&config).ok_or("no user in its current context")?;
    if let Some(data) = &user.client_certificate_data {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| format!("client-certificate-data: {e}"))?;
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    let file = user
        .client_certificate
        .as_ref()
        .ok_or("no client certificate")?;
    std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))
}

/// The current context's user.
pub(crate) fn current_user(config: &Kubeconfig) -> Option<&kube::config::AuthInfo> {
    let context = current_context(config)?;
    let user = context.user.as_deref()?;
    config
        .auth_infos
        .iter()
        .find(|a| a.name == user)?
        .auth_info
        .as_ref()
}

fn current_context(config: &Kubeconfig) -> Option<&kube::config::Context> {
    let name = config.current_context.as_deref()?;
    config
        .contexts
        .iter()
        .find(|c| c.name == name)?
        .context
        .as_ref()
}

fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, ClientCertificateError> {
    Kubeconfig::read_from(path).map_err(|e| ClientCertificateError::Kubeconfig {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

async fn client_of(
    path: &Path,
    config: Kubeconfig,
) -> Result<kube::Client, ClientCertificateError> {
    let failed = |reason: String| ClientCertificateError::Kubeconfig {
        path: path.to_path_buf(),
        reason,
    };
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .map_err(|e| failed(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| failed(e.to_string()))
}

/// Waits up to a minute for the API server's `/healthz`; logs and goes on
/// when it does not answer (the request then says why).
async fn wait_for_server(client: &kube::Client) {
    let deadline = tokio::time::Instant::now() + SERVER_WAIT;
    loop {
        let request = http::Request::get("/healthz").body(Vec::new());
        let answer = match request {
            Ok(request) => {
                tokio::time::timeout(Duration::from_secs(1), client.request_text(request)).await
            }
            Err(_) => return,
        };
        match answer {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => tracing::info!(error = %e, "failed to connect to the API server"),
            Err(_) => tracing::info!("failed to connect to the API server: no answer within 1s"),
        }
        let pause = Duration::from_secs(2).mul_f64(1.0 + 0.2 * rand::random::<f64>());
        if tokio::time::Instant::now() + pause > deadline {
            tracing::info!("timed out waiting to connect to the API server");
            return;
        }
        tokio::time::sleep(pause).await;
    }
}

/// Writes `contents` to `path`, mode 0600, through a file beside it
/// renamed over it.
fn write_private(path: &Path, contents: &[u8]) -> Result<(), ClientCertificateError> {
    use std::io::Write;
    let error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ClientCertificateError::File { path, source }
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(error(dir))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".writing");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(error(&tmp))?;
    file.write_all(contents).map_err(error(&tmp))?;
    file.sync_all().map_err(error(&tmp))?;
    std::fs::rename(&tmp, path).map_err(error(path))
}

/// The kubeconfig the kubelet writes after a bootstrap
/// (`writeKubeconfigFromBootstrapping`), as YAML.
fn write_kubeconfig(
    bootstrap: &Kubeconfig,
    path: &Path,
    pem_path: &Path,
) -> Result<(), ClientCertificateError> {
    let cluster = current_context(bootstrap)
        .and_then(|c| bootstrap.clusters.iter().find(|n| n.name == c.cluster))
        .and_then(|n| n.cluster.as_ref())
        .ok_or_else(|| ClientCertificateError::Kubeconfig {
            path: path.to_path_buf(),
            reason: "the bootstrap kubeconfig has no cluster in its current context".into(),
        })?;
    let quoted = |text: &str| serde_json::Value::from(text).to_string();
    let mut lines = vec![
        "apiVersion: v1".to_string(),
        "clusters:".to_string(),
        "- cluster:".to_string(),
    ];
    match (
        &cluster.certificate_authority,
        &cluster.certificate_authority_data,
    ) {
        (Some(file), _) if !file.is_empty() => {
            lines.push(format!("    certificate-authority: {}", quoted(file)));
        }
        (_, Some(data)) if !data.is_empty() => {
            lines.push(format!(
                "    certificate-authority-data: {}",
                quoted(data.trim())
            ));
        }
        _ => {}
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        lines.push("    insecure-skip-tls-verify: true".into());
    }
    let server = cluster.server.as_deref().unwrap_or_default();
    let pem = pem_path.display().to_string();
    lines.extend([
        format!("    server: {}", quoted(server)),
        "  name: default-cluster".into(),
        "contexts:".into(),
        "- context:".into(),
        "    cluster: default-cluster".into(),
        "    namespace: default".into(),
        "    user: default-auth".into(),
        "  name: default-context".into(),
        "current-context: default-context".into(),
        "kind: Config".into(),
        "users:".into(),
        "- name: default-auth".into(),
        "  user:".into(),
        format!("    client-certificate: {}", quoted(&pem)),
        format!("    client-key: {}", quoted(&pem)),
        String::new(),
    ]);
    write_private(path, lines.join("\n").as_bytes())
}
