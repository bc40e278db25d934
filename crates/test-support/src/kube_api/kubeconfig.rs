//! Client certificates and kubeconfig files for the identities a test runs programs as: a token
//! user, a client certificate, a ServiceAccount's token.

use std::path::Path;

use serde_json::json;

use super::{Identity, KubeApi};
use crate::client_certificates::ClientCertificate;

impl KubeApi {
    /// A client certificate of node `node` (`system:node:<node>` in
    /// `system:nodes`) the API server accepts for `valid_for`, written with
    /// its key to `path`.
    pub fn issue_node_certificate(
        &self,
        node: &str,
        valid_for: std::time::Duration,
        path: &Path,
    ) -> ClientCertificate {
        self.client_ca.issue(
            &format!("system:node:{node}"),
            "system:nodes",
            valid_for,
            path,
        )
    }

    /// A kubeconfig for node `node`'s own identity (`system:node:<node>`,
    /// a client certificate valid for a day), written once in the API
    /// server's directory: what a kubelet of another node would use. The
    /// Node authorizer and NodeRestriction confine it to that node.
    pub fn kubeconfig_of_node(&self, node: &str) -> std::path::PathBuf {
        let dir = self.dir.path().join("nodes");
        let kubeconfig = dir.join(format!("{node}.kubeconfig"));
        if !kubeconfig.exists() {
            std::fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
            let credential = dir.join(format!("{node}.pem"));
            let day = std::time::Duration::from_secs(24 * 3600);
            self.issue_node_certificate(node, day, &credential);
            self.write_certificate_kubeconfig(&kubeconfig, &credential);
        }
        kubeconfig
    }

    /// A bootstrap kubeconfig, as `kubeadm join` writes one
    /// (`bootstrap-kubelet.conf`): a token of `system:bootstrap:abcdef` in
    /// group `system:bootstrappers`, which may ask for a node's client
    /// certificate once [`allow_tls_bootstrap`](Self::allow_tls_bootstrap)
    /// bound its roles. Written once in the API server's directory.
    pub fn bootstrap_kubeconfig(&self) -> std::path::PathBuf {
        let file = self.dir.path().join("bootstrap-kubelet.conf");
        if !file.exists() {
            self.write_kubeconfig(
                &file,
                "tls-bootstrap-token-user",
                json!({"token": super::BOOTSTRAP_TOKEN}),
            );
        }
        file
    }

    /// The client CA's certificate and key, as the controller-manager's
    /// `--cluster-signing-cert-file` and `--cluster-signing-key-file` take
    /// them: the certificates it signs are accepted by the API server.
    pub fn client_ca_files(&self) -> (std::path::PathBuf, std::path::PathBuf) {
        (
            self.dir.path().join("client-ca.crt"),
            self.dir.path().join("client-ca.key"),
        )
    }

    /// The ClusterRoleBindings kubeadm makes for TLS bootstrap: the
    /// bootstrappers may make CertificateSigningRequests and have them
    /// approved (`nodeclient`), the nodes have their renewals approved
    /// (`selfnodeclient`).
    pub async fn allow_tls_bootstrap(&self) {
        for (name, role, group) in [
            (
                "kubeadm:kubelet-bootstrap",
                "system:node-bootstrapper",
                "system:bootstrappers",
            ),
            (
                "kubeadm:node-autoapprove-bootstrap",
                "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                "system:bootstrappers",
            ),
            (
                "kubeadm:node-autoapprove-certificate-rotation",
                "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                "system:nodes",
            ),
        ] {
            let binding = json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
            });
            let answer = self
                .request(
                    Identity::Admin,
                    "POST",
                    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                    Some(&binding),
                )
                .await;
            assert!(
                answer.status == 201 || answer.status == 409,
                "create {name}: {answer:?}"
            );
        }
    }

    /// A token the API server issues for ServiceAccount `namespace/name`
    /// (TokenRequest), valid for an hour; bound to pod `pod` in the same
    /// namespace when given, as the kubelet asks for a pod's projected
    /// token: the API server then names the pod's node in the token
    /// (`authentication.kubernetes.io/node-name` in the user's extra).
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        pod: Option<&str>,
    ) -> String {
        let mut spec = json!({"expirationSeconds": 3600});
        if let Some(pod) = pod {
            let found = self
                .admin(
                    "GET",
                    &format!("/api/v1/namespaces/{namespace}/pods/{pod}"),
                    None,
                )
                .await;
            spec["boundObjectRef"] = json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod,
                "uid": found["metadata"]["uid"],
            });
        }
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": spec,
        });
        let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token");
        let answer = self
            .request(Identity::Admin, "POST", &path, Some(&request))
            .await;
        assert_eq!(
            answer.status, 201,
            "TokenRequest for {namespace}/{name}: {}",
            answer.body
        );
        answer.body["status"]["token"]
            .as_str()
            .unwrap_or_else(|| panic!("TokenRequest answer without a token: {}", answer.body))
            .to_string()
    }

    /// Writes to `file` a kubeconfig for ServiceAccount `namespace/name`,
    /// with a token the API server issues for it (bound to pod `pod` when
    /// given, see [`service_account_token`](Self::service_account_token)).
    pub async fn write_service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        pod: Option<&str>,
        file: &Path,
    ) {
        let token = self.service_account_token(namespace, name, pod).await;
        let user = format!("system:serviceaccount:{namespace}:{name}");
        self.write_kubeconfig(file, &user, json!({"token": token}));
    }

    /// Writes to `file` a kubeconfig whose user's token is read from
    /// `token_file` (`tokenFile`, as a pod's projected token is named).
    pub fn write_token_file_kubeconfig(&self, file: &Path, token_file: &Path) {
        self.write_kubeconfig(file, "token-file", json!({"tokenFile": token_file}));
    }

    /// Writes to `file` a kubeconfig whose user is the client certificate
    /// and key in `credential` (one PEM file, as the kubelet's
    /// `kubelet-client-current.pem`).
    pub fn write_certificate_kubeconfig(&self, file: &Path, credential: &Path) {
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{
                "name": "kube-api",
                "cluster": {
                    "server": self.url,
                    "certificate-authority": self.ca_file(),
                },
            }],
            "users": [{"name": "node", "user": {
                "client-certificate": credential,
                "client-key": credential,
            }}],
            "contexts": [{"name": "node", "context": {"cluster": "kube-api", "user": "node"}}],
            "current-context": "node",
        });
        let text = serde_json::to_string_pretty(&config).expect("serialize kubeconfig");
        std::fs::write(file, text).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
    }

    /// Writes a kubeconfig for `user` with the credentials `auth` (a
    /// kubeconfig's `user` entry). JSON is valid YAML, and serde_json
    /// quotes the paths.
    pub(super) fn write_kubeconfig(&self, file: &Path, user: &str, auth: serde_json::Value) {
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{
                "name": "kube-api",
                "cluster": {
                    "server": self.url,
                    "certificate-authority": self.ca_file(),
                },
            }],
            "users": [{"name": user, "user": auth}],
            "contexts": [{"name": user, "context": {"cluster": "kube-api", "user": user}}],
            "current-context": user,
        });
        let text = serde_json::to_string_pretty(&config).expect("serialize kubeconfig");
        std::fs::write(file, text).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
    }
}
