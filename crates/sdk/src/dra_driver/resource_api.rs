//! The `resource.k8s.io` API in the version the API server serves (feature
//! `kube`): v1, or v1beta2 on a cluster that does not serve v1 (v1 off in
//! `--runtime-config`, or a server from before v1). ResourceSlices and
//! ResourceClaims are the same objects in both versions under another
//! `apiVersion`, so the driver works with the v1 types either way and the
//! objects are converted on the way (the Go helper falls back the same
//! way).
//!
//! The version is asked once, by discovery of `resource.k8s.io/v1`, when
//! first needed; a failed discovery is asked again by the next request.

use std::marker::PhantomData;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::OnceCell;

/// The API group.
const GROUP: &str = "resource.k8s.io";

/// A version of the `resource.k8s.io` API the driver speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResourceVersion {
    /// `resource.k8s.io/v1`.
    V1,
    /// `resource.k8s.io/v1beta2`: the same objects.
    V1beta2,
}

impl ResourceVersion {
    fn name(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::V1beta2 => "v1beta2",
        }
    }
}

/// The version the API server serves, asked once and shared.
#[derive(Clone)]
pub(crate) struct ResourceVersions {
    client: Client,
    version: Arc<OnceCell<ResourceVersion>>,
}

impl ResourceVersions {
    /// Versions asked of the server with `client`.
    pub(crate) fn new(client: Client) -> Self {
        Self {
            client,
            version: Arc::new(OnceCell::new()),
        }
    }

    /// The version to use: v1 when the server serves it, else v1beta2.
    pub(crate) async fn get(&self) -> Result<ResourceVersion, kube::Error> {
        self.version
            .get_or_try_init(|| async {
                let v1 = format!("{GROUP}/v1");
                match self.client.list_api_group_resources(&v1).await {
                    Ok(_) => Ok(ResourceVersion::V1),
                    Err(kube::Error::Api(status)) if status.is_not_found() => {
                        tracing::info!("the API server does not serve {v1}: using {GROUP}/v1beta2");
                        Ok(ResourceVersion::V1beta2)
                    }
                    Err(e) => Err(e),
                }
            })
            .await
            .copied()
    }

    /// The client the versions are asked with.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }
}

/// A kind of the `resource.k8s.io` API, by its v1 type `K`, in the version
/// the server serves.
pub(crate) struct ResourceApi<K> {
    api: Api<DynamicObject>,
    version: ResourceVersion,
    _kind: PhantomData<fn() -> K>,
}

impl<K> ResourceApi<K>
where
    K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Send + 'static,
{
    /// The cluster-scoped (or all-namespaces) collection.
    pub(crate) fn all(client: Client, version: ResourceVersion) -> Self {
        let resource = api_resource::<K>(version);
        Self {
            api: Api::all_with(client, &resource),
            version,
            _kind: PhantomData,
        }
    }

    /// The collection of namespace `namespace`.
    pub(crate) fn namespaced(client: Client, namespace: &str, version: ResourceVersion) -> Self {
        let resource = api_resource::<K>(version);
        Self {
            api: Api::namespaced_with(client, namespace, &resource),
            version,
            _kind: PhantomData,
        }
    }

    /// Object `name`.
    pub(crate) async fn get(&self, name: &str) -> Result<K, kube::Error> {
        from_dynamic(self.api.get(name).await?)
    }

    /// Creates `object`: as stored.
    pub(crate) async fn create(&self, object: &K) -> Result<K, kube::Error> {
        let object = to_dynamic(object, self.version)?;
        from_dynamic(self.api.create(&PostParams::default(), &object).await?)
    }

    /// Replaces object `name` with `object`: as stored.
    pub(crate) async fn replace(&self, name: &str, object: &K) -> Result<K, kube::Error> {
        let object = to_dynamic(object, self.version)?;
        let params = PostParams::default();
        from_dynamic(self.api.replace(name, &params, &object).await?)
    }

    /// Deletes object `name`.
    pub(crate) async fn delete(
        &self,
        name: &str,
        params: &DeleteParams,
    ) -> Result<(), kube::Error> {
        self.api.delete(name, params).await.map(|_| ())
    }

    /// Watches the objects `config` selects, as `K`. An object that does
    /// not read as `K` fails the watch, which starts again.
    pub(crate) fn watch(
        &self,
        config: watcher::Config,
    ) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {
        watcher(self.api.clone(), config)
            .map(|event| event.and_then(|e| convert(e).map_err(watcher::Error::WatchFailed)))
    }
}

/// A watch event of objects received in either version, as the v1 type.
fn convert<K: DeserializeOwned>(
    event: watcher::Event<DynamicObject>,
) -> Result<watcher::Event<K>, kube::Error> {
    Ok(match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(from_dynamic(o)?),
        watcher::Event::Delete(o) => watcher::Event::Delete(from_dynamic(o)?),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(from_dynamic(o)?),
        watcher::Event::InitDone => watcher::Event::InitDone,
    })
}

/// Where kind `K` is served in `version`.
fn api_resource<K: kube::Resource<DynamicType = ()>>(version: ResourceVersion) -> ApiResource {
    let kind = K::kind(&()).into_owned();
    ApiResource {
        group: GROUP.into(),
        version: version.name().into(),
        api_version: format!("{GROUP}/{}", version.name()),
        plural: K::plural(&()).into_owned(),
        kind,
    }
}

/// `object` as sent in `version`.
fn to_dynamic<K: Serialize>(
    object: &K,
    version: ResourceVersion,
) -> Result<DynamicObject, kube::Error> {
    let mut value = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
    set_api_version(&mut value, version);
    serde_json::from_value(value).map_err(kube::Error::SerdeError)
}

/// `object`, received in either version, as the v1 type.
fn from_dynamic<K: DeserializeOwned>(object: DynamicObject) -> Result<K, kube::Error> {
    let mut value = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
    set_api_version(&mut value, ResourceVersion::V1);
    serde_json::from_value(value).map_err(kube::Error::SerdeError)
}

fn set_api_version(value: &mut Value, version: ResourceVersion) {
    if let Some(object) = value.as_object_mut() {
        object.insert(
            "apiVersion".into(),
            Value::String(format!("{GROUP}/{}", version.name())),
        );
    }
}
