//! `nodeplugins pod-resources`: reads the pod-resources socket as a
//! monitoring agent does, over gRPC, and prints what it serves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use nodeplugins_api::constants::layout::DEFAULT_ROOT_DIR;
use nodeplugins_api::constants::pod_resources::{DIR, SOCKET};
use nodeplugins_api::podresources::v1;
use nodeplugins_api::podresources::v1::pod_resources_lister_client::PodResourcesListerClient;
use tonic::transport::Channel;

use crate::output::{self, Format};

/// How long to wait for the socket and for each answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What to read.
#[derive(Debug, clap::Args)]
pub(crate) struct PodResourcesArgs {
    /// Root directory of the agent (the socket is `<root>/pod-resources/kubelet.sock`).
    #[arg(long, env = "NODEPLUGINS_ROOT_DIR", default_value = DEFAULT_ROOT_DIR)]
    root_dir: PathBuf,
    /// The socket, if not the one under the root directory.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Only this pod, as NAMESPACE/NAME (the API's Get); NAME or /NAME for
    /// a pod without a namespace (one known only by its UID is named by it).
    #[arg(long, value_parser = parse_pod, conflicts_with = "allocatable")]
    pod: Option<(String, String)>,
    /// The devices that can be allocated instead (GetAllocatableResources).
    #[arg(long)]
    allocatable: bool,
    /// Output format (json: the API's answer, with its field names).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// `NAMESPACE/NAME`, `/NAME` or `NAME` as (namespace, name); the namespace
/// may be empty, the name may not.
fn parse_pod(text: &str) -> Result<(String, String), String> {
    let (namespace, name) = text.split_once('/').unwrap_or(("", text));
    if name.is_empty() || name.contains('/') {
        return Err(format!("{text:?} is not NAMESPACE/NAME, /NAME or NAME"));
    }
    Ok((namespace.into(), name.into()))
}

async fn client(socket: &Path) -> anyhow::Result<PodResourcesListerClient<Channel>> {
    let channel = nodeplugins_api::transport::dial(socket, TIMEOUT)
        .await
        .with_context(|| format!("connect to the pod-resources socket {}", socket.display()))?;
    Ok(PodResourcesListerClient::new(channel))
}

/// Pod `namespace/name` as the socket at `socket` serves it.
pub(crate) async fn get(
    socket: &Path,
    namespace: &str,
    name: &str,
) -> anyhow::Result<v1::PodResources> {
    let mut request = tonic::Request::new(v1::GetPodResourcesRequest {
        pod_name: name.into(),
        pod_namespace: namespace.into(),
    });
    request.set_timeout(TIMEOUT);
    let reply = client(socket)
        .await?
        .get(request)
        .await
        .with_context(|| format!("Get pod {namespace}/{name}"))?;
    reply
        .into_inner()
        .pod_resources
        .with_context(|| format!("Get pod {namespace}/{name}: an empty answer"))
}

pub(crate) async fn run(args: PodResourcesArgs) -> anyhow::Result<()> {
    let socket = args
        .socket
        .unwrap_or_else(|| args.root_dir.join(DIR).join(SOCKET));
    let mut out = std::io::stdout().lock();
    if let Some((namespace, name)) = &args.pod {
        let pod = get(&socket, namespace, name).await?;
        return output::pod_resources::pod(&pod, args.output, &mut out);
    }
    let mut client = client(&socket).await?;
    if args.allocatable {
        let mut request = tonic::Request::new(v1::AllocatableResourcesRequest {});
        request.set_timeout(TIMEOUT);
        let reply = client
            .get_allocatable_resources(request)
            .await
            .context("GetAllocatableResources")?;
        return output::pod_resources::allocatable(&reply.into_inner(), args.output, &mut out);
    }
    let mut request = tonic::Request::new(v1::ListPodResourcesRequest {});
    request.set_timeout(TIMEOUT);
    let reply = client.list(request).await.context("List")?;
    output::pod_resources::pods(&reply.into_inner().pod_resources, args.output, &mut out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_named_with_or_without_its_namespace() {
        let pod = |ns: &str, name: &str| Ok((ns.to_string(), name.to_string()));
        assert_eq!(parse_pod("ml/train"), pod("ml", "train"));
        assert_eq!(parse_pod("/uid-1"), pod("", "uid-1"), "an empty namespace");
        assert_eq!(parse_pod("uid-1"), pod("", "uid-1"), "no namespace at all");
        for bad in ["", "ml/", "/", "a/b/c"] {
            assert!(parse_pod(bad).is_err(), "{bad:?}");
        }
    }
}
