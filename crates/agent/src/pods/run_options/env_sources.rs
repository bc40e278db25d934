//! The ConfigMaps and Secrets a container takes variables from (`envFrom`,
//! `configMapKeyRef`, `secretKeyRef`), read (by the pod's worker) through the same watches as
//! the pods' volumes (the kubelet's ConfigMap and Secret managers, which
//! register every object a pod names, its volumes' and its containers'),
//! before the container's environment is made. A read that fails (the
//! watch not listed within a second) is kept as the error the kubelet
//! gives, for the variable that needs it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};

use crate::pods::admit::spec::containers;

/// What a read of one object gave: the object, none (it does not exist),
/// or the error.
pub(crate) type Read<K> = Result<Option<Arc<K>>, String>;

/// The objects one container's environment names, read.
#[derive(Debug, Default)]
pub(crate) struct EnvObjects {
    namespace: String,
    config_maps: BTreeMap<String, Read<ConfigMap>>,
    secrets: BTreeMap<String, Read<Secret>>,
}

/// Which object of a kind a variable names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ObjectKind {
    ConfigMap,
    Secret,
}

impl EnvObjects {
    /// None read yet, in `namespace`.
    pub(crate) fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            ..Self::default()
        }
    }

    /// ConfigMap `name` as read.
    pub(crate) fn insert_config_map(&mut self, name: String, read: Read<ConfigMap>) {
        self.config_maps.insert(name, read);
    }

    /// Secret `name` as read.
    pub(crate) fn insert_secret(&mut self, name: String, read: Read<Secret>) {
        self.secrets.insert(name, read);
    }

    /// The data of object `name` of `kind` (values as text): `None` when
    /// it does not exist, else an error in the kubelet's words.
    pub(crate) fn data(
        &self,
        kind: ObjectKind,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        let unread = || Err(format!("{} {name:?} not registered", kind.as_str()));
        match kind {
            ObjectKind::ConfigMap => match self.config_maps.get(name) {
                Some(Ok(Some(map))) => Ok(Some(map.data.clone().unwrap_or_default())),
                Some(Ok(None)) => Ok(None),
                Some(Err(e)) => Err(e.clone()),
                None => unread(),
            },
            ObjectKind::Secret => match self.secrets.get(name) {
                Some(Ok(Some(secret))) => Ok(Some(
                    secret
                        .data
                        .iter()
                        .flatten()
                        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                        .collect(),
                )),
                Some(Ok(None)) => Ok(None),
                Some(Err(e)) => Err(e.clone()),
                None => unread(),
            },
        }
    }

    /// Objects as given, for tests: (name, data) of ConfigMaps and
    /// Secrets that exist, in `namespace`.
    #[cfg(test)]
    pub(crate) fn given(
        namespace: &str,
        config_maps: &[(&str, &[(&str, &str)])],
        secrets: &[(&str, &[(&str, &str)])],
        missing: &[(ObjectKind, &str)],
    ) -> Self {
        let pairs = |data: &[(&str, &str)]| -> BTreeMap<String, String> {
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let mut objects = Self {
            namespace: namespace.to_string(),
            ..Self::default()
        };
        for (name, data) in config_maps {
            let map = ConfigMap {
                data: Some(pairs(data)),
                ..ConfigMap::default()
            };
            objects
                .config_maps
                .insert(name.to_string(), Ok(Some(Arc::new(map))));
        }
        for (name, data) in secrets {
            let secret = Secret {
                data: Some(
                    pairs(data)
                        .into_iter()
                        .map(|(k, v)| (k, k8s_openapi::ByteString(v.into_bytes())))
                        .collect(),
                ),
                ..Secret::default()
            };
            objects
                .secrets
                .insert(name.to_string(), Ok(Some(Arc::new(secret))));
        }
        for (kind, name) in missing {
            match kind {
                ObjectKind::ConfigMap => {
                    objects.config_maps.insert(name.to_string(), Ok(None));
                }
                ObjectKind::Secret => {
                    objects.secrets.insert(name.to_string(), Ok(None));
                }
            }
        }
        objects
    }

    /// The namespace the objects are in.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }
}

impl ObjectKind {
    /// The kubelet's word for it in "not found" (its managers' resource).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMap => "configmap",
            Self::Secret => "secret",
        }
    }

    /// Its name in "couldn't find key".
    pub(crate) fn title(self) -> &'static str {
        match self {
            Self::ConfigMap => "ConfigMap",
            Self::Secret => "Secret",
        }
    }
}

/// The kubelet's error for an object read with no API server.
pub(crate) fn no_client(kind: &str, namespace: &str, name: &str) -> String {
    format!("couldn't get {kind} {namespace}/{name}, no kubeClient defined")
}

/// The ConfigMaps and Secrets `container`'s environment names.
pub(crate) fn named_by(container: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut config_maps = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for from in container.env_from.iter().flatten() {
        if let Some(map) = &from.config_map_ref {
            config_maps.insert(map.name.clone());
        }
        if let Some(secret) = &from.secret_ref {
            secrets.insert(secret.name.clone());
        }
    }
    for var in container.env.iter().flatten() {
        let Some(from) = &var.value_from else {
            continue;
        };
        if let Some(key) = &from.config_map_key_ref {
            config_maps.insert(key.name.clone());
        }
        if let Some(key) = &from.secret_key_ref {
            secrets.insert(key.name.clone());
        }
    }
    (config_maps, secrets)
}

/// The ConfigMaps and Secrets the environment of any of `pod`'s
/// containers names.
pub(crate) fn env_objects_named(pod: &Pod) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut config_maps = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for (container, _) in containers(pod) {
        let (maps, more) = named_by(container);
        config_maps.extend(maps);
        secrets.extend(more);
    }
    (config_maps, secrets)
}
