//! The CSI rule: the node's identity, which the kubelet asks for while it
//! registers a CSI driver. A CSI driver's own service has csi-sanity.

use std::path::Path;

use nodeplugins_api::call;
use nodeplugins_api::csi::v1::NodeGetInfoRequest;
use nodeplugins_api::csi::v1::node_client::NodeClient;
use nodeplugins_api::transport::{dial, root_cause};

use super::deadlines::Deadlines;
use super::rule::Verdict;

/// NodeGetInfo on the driver's endpoint, as the kubelet's CSI handler
/// calls it in RegisterPlugin: an error, or an empty node id (which its
/// node info manager refuses), fails the registration.
pub(crate) async fn node_info_rule(endpoint: &Path, deadlines: Deadlines) -> Verdict {
    let channel = match dial(endpoint, deadlines.dial()).await {
        Ok(channel) => channel,
        Err(e) => return Verdict::Fail(format!("{}: {}", endpoint.display(), root_cause(&e))),
    };
    let mut client = NodeClient::new(channel);
    match call::unary(
        deadlines.csi_call(),
        client.node_get_info(NodeGetInfoRequest {}),
    )
    .await
    {
        Err(e) => Verdict::Fail(format!(
            "NodeGetInfo: {e}: the kubelet undoes the registration and retries"
        )),
        Ok(info) if info.node_id.is_empty() => Verdict::Fail(
            "NodeGetInfo answered an empty node id: the kubelet refuses it (\"driverNodeID must not be empty\") and fails the registration".into(),
        ),
        Ok(info) => Verdict::Pass(format!(
            "node id {:?}, max volumes {}, topology {:?}",
            info.node_id,
            info.max_volumes_per_node,
            info.accessible_topology.map(|t| t.segments).unwrap_or_default()
        )),
    }
}
