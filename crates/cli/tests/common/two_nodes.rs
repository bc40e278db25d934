//! The oracle's setting for what pods live through: the real kubelet
//! v1.37.2 and our agent, each on its own containerd, registered as two
//! nodes of one API server; namespace `theirs` for the kubelet's pods,
//! `ours` for the agent's; what both made of the same pod read back with
//! the nodes' addresses and ports made alike.

use std::collections::BTreeSet;
use std::time::Duration;

use nodeplugins_test_support::containerd::Containerd;
use nodeplugins_test_support::kube_api::{Identity, KubeApi};
use nodeplugins_test_support::process::ChildProcess;
use nodeplugins_test_support::real_kubelet::RealKubelet;
use nodeplugins_test_support::wait::eventually;
use serde_json::{Value, json};
use tempfile::TempDir;

/// The real kubelet's node.
pub const KUBELET_NODE: &str = "kubelet-node";
/// Our agent's node.
pub const OUR_NODE: &str = "agent-node";
/// Long enough for a first image unpack and a container's kill.
pub const LONG: Duration = Duration::from_secs(120);

/// The two nodes, and what makes them alike.
pub struct TwoNodes {
    // Dropped first: the node agents before their runtimes and the API.
    _agent: ChildProcess,
    pub kubelet: RealKubelet,
    _runtimes: (Containerd, Containerd),
    _root: TempDir,
    pub api: KubeApi,
    /// (namespace, node): the kubelet's first.
    pub nodes: [(&'static str, &'static str); 2],
    /// Per node: its address and a port of its own, each with the word
    /// it is replaced by (`{ip}`, `{port}`).
    pub normalize: [Vec<(String, &'static str)>; 2],
    /// Per node: a port nothing listens on when the test starts.
    pub ports: [u16; 2],
}

impl TwoNodes {
    /// Both nodes up, their namespaces made.
    pub async fn start() -> Self {
        nodeplugins_test_support::init_tracing();
        let api = KubeApi::start(OUR_NODE).await;
        let kubelet_containerd = Containerd::start().await;
        let kubelet_config = api.kubeconfig_of_node(KUBELET_NODE);
        let kubelet = RealKubelet::start(KUBELET_NODE, &kubelet_config, &kubelet_containerd).await;
        let our_containerd = Containerd::start().await;
        let root = TempDir::new().unwrap();
        let endpoint = our_containerd.endpoint();
        let agent = super::kube::publishing_agent_as(
            &api.node_kubeconfig(),
            OUR_NODE,
            root.path(),
            &[
                "--register-node",
                "on",
                "--container-runtime-endpoint",
                &endpoint,
            ],
        );
        let nodes = [("theirs", KUBELET_NODE), ("ours", OUR_NODE)];
        let mut normalize = [Vec::new(), Vec::new()];
        let mut ports = [0; 2];
        for (i, (ns, node)) in nodes.into_iter().enumerate() {
            namespace(&api, ns).await;
            let port = free_port();
            normalize[i] = vec![
                (node_ip(&api, node).await, "{ip}"),
                (port.to_string(), "{port}"),
            ];
            ports[i] = port;
        }
        Self {
            _agent: agent,
            kubelet,
            _runtimes: (kubelet_containerd, our_containerd),
            _root: root,
            api,
            nodes,
            normalize,
            ports,
        }
    }

    /// Creates `pod` in namespace `ns`.
    pub async fn create(&self, ns: &str, pod: &Value) {
        let path = format!("/api/v1/namespaces/{ns}/pods");
        self.api.admin("POST", &path, Some(pod)).await;
    }

    /// Pod `name` of `ns` once `pred` holds for it.
    pub async fn pod_when(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        eventually(&format!("{ns}/{name} {what}"), LONG, || async {
            let pod = self.api.admin("GET", &path, None).await;
            pred(&pod).then_some(pod)
        })
        .await
    }

    /// The Events of pod `name` on both nodes whose reason is one of
    /// `reasons`, once the same on both or after 15 s (Events are
    /// recorded in the background): (type, reason, message, field path),
    /// the kubelet's first.
    pub async fn events(&self, name: &str, reasons: &[&str]) -> [BTreeSet<[String; 4]>; 2] {
        let read = || async {
            let mut found = [BTreeSet::new(), BTreeSet::new()];
            for (i, (ns, _)) in self.nodes.iter().enumerate() {
                found[i] = self.events_of(ns, name, reasons, &self.normalize[i]).await;
            }
            found
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let found = read().await;
            if found[0] == found[1] || tokio::time::Instant::now() >= deadline {
                return found;
            }
            // Polled: Events come one by one, with nothing to wait on.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn events_of(
        &self,
        ns: &str,
        name: &str,
        reasons: &[&str],
        replace: &[(String, &str)],
    ) -> BTreeSet<[String; 4]> {
        let path = format!("/api/v1/namespaces/{ns}/events");
        let events = self.api.admin("GET", &path, None).await;
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["name"] == name)
            .filter(|e| reasons.contains(&e["reason"].as_str().unwrap_or("")))
            .map(|e| {
                let mut message = text(&e["message"]);
                for (from, to) in replace {
                    message = message.replace(from.as_str(), to);
                }
                [
                    text(&e["type"]),
                    text(&e["reason"]),
                    message,
                    text(&e["involvedObject"]["fieldPath"]),
                ]
            })
            .collect()
    }

    /// Adds to `differences` what differs between the kubelet's `theirs`
    /// and our `ours` of `what`.
    pub fn compare<T: PartialEq + std::fmt::Debug>(
        differences: &mut Vec<String>,
        what: &str,
        [theirs, ours]: [T; 2],
    ) {
        if theirs != ours {
            differences.push(format!(
                "{what}:\n  kubelet: {theirs:#?}\n  ours:    {ours:#?}"
            ));
        }
    }

    /// Fails with `differences`, when there are any, and the last lines
    /// of the kubelet's log.
    pub fn assert_alike(&self, differences: &[String]) {
        assert!(
            differences.is_empty(),
            "{} differences:\n{}\n(the kubelet's log: {})",
            differences.len(),
            differences.join("\n"),
            self.kubelet
                .log()
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// Namespace `name` with its default ServiceAccount.
async fn namespace(api: &KubeApi, name: &str) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    api.admin("POST", "/api/v1/namespaces", Some(&ns)).await;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    let path = format!("/api/v1/namespaces/{name}/serviceaccounts");
    let _ = api.request(Identity::Admin, "POST", &path, Some(&sa)).await;
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The node's address, as its Node says.
async fn node_ip(api: &KubeApi, node: &str) -> String {
    let path = format!("/api/v1/nodes/{node}");
    eventually(&format!("{node}'s address"), LONG, || async {
        let node = api.request(Identity::Admin, "GET", &path, None).await.body;
        node["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == "InternalIP")
            .and_then(|a| a["address"].as_str().map(str::to_string))
    })
    .await
}

/// A pod `name` on `node` of one busybox container `app` running
/// `script`, with `fields` (more of the container's fields: probes,
/// lifecycle).
pub fn one_container_pod(node: &str, name: &str, script: &str, fields: Value) -> Value {
    let mut app = json!({
        "name": "app",
        "image": nodeplugins_test_support::oci_image::BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    });
    for (field, value) in fields.as_object().unwrap() {
        app[field] = value.clone();
    }
    super::pods::bound_pod(node, name, vec![app])
}

/// What of a pod's status its containers' lives decide: the phase, its
/// first container's image (as the runtime names it), ready, started, running, restart count and last
/// state's reason and exit code (its state's, once terminated), and the
/// pod's conditions' (type, status, reason, message).
pub fn shape(pod: &Value) -> Value {
    let c = &pod["status"]["containerStatuses"][0];
    let last = &c["lastState"]["terminated"];
    let now = &c["state"]["terminated"];
    let mut conditions: Vec<Value> = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!([c["type"], c["status"], c["reason"], c["message"]]))
        .collect();
    conditions.sort_by_key(|c| c[0].as_str().unwrap_or_default().to_string());
    json!({
        "phase": pod["status"]["phase"],
        "image": c["image"],
        "ready": c["ready"],
        "started": c["started"],
        "running": c["state"]["running"].is_object(),
        "restartCount": c["restartCount"],
        "lastState": [last["reason"], last["exitCode"]],
        "terminated": [now["reason"], now["exitCode"]],
        "conditions": conditions,
    })
}

/// `text` with a pod's namespace and UID in words both nodes share (as
/// in the kubelet's `name_namespace(uid)`).
pub fn normalized(text: &str, ns: &str, uid: &str) -> String {
    text.replace(uid, "{uid}")
        .replace(&format!("_{ns}("), "_{ns}(")
}

/// A pod's first container's status.
pub fn container(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

/// `text` with each run of 64 hex digits (a runtime's id) as `{id}`.
pub fn without_ids(text: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() {
            run.push(c);
            continue;
        }
        if run.len() == 64 {
            out.push_str("{id}");
        } else {
            out.push_str(&run);
        }
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}
