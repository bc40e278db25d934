//! A registration plugin: serves `pluginregistration.Registration` on a
//! socket through our transport and records every NotifyRegistrationStatus.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodeplugins_api::pluginregistration::v1::registration_server::{
    Registration, RegistrationServer,
};
use nodeplugins_api::pluginregistration::v1::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use nodeplugins_api::transport::{BoundSocket, serve};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

/// How the fake answers GetInfo.
#[derive(Debug, Clone)]
pub enum GetInfoBehaviour {
    /// Answer with the configured info.
    Answer,
    /// Never answer.
    Hang,
    /// Fail with this status message.
    Fail(String),
}

#[derive(Clone)]
struct Service {
    info: PluginInfo,
    get_info: Arc<Mutex<GetInfoBehaviour>>,
    get_info_calls: watch::Sender<usize>,
    notifications: watch::Sender<Vec<RegistrationStatus>>,
    notify_delay: Duration,
    notify_gate: Option<Arc<Semaphore>>,
}

#[tonic::async_trait]
impl Registration for Service {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        self.get_info_calls.send_modify(|n| *n += 1);
        let behaviour = self.get_info.lock().unwrap().clone();
        match behaviour {
            GetInfoBehaviour::Answer => Ok(Response::new(self.info.clone())),
            GetInfoBehaviour::Hang => std::future::pending().await,
            GetInfoBehaviour::Fail(message) => Err(Status::unavailable(message)),
        }
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        tokio::time::sleep(self.notify_delay).await;
        if let Some(gate) = &self.notify_gate {
            let _ = gate.acquire().await.map(|permit| permit.forget());
        }
        let status = request.into_inner();
        self.notifications.send_modify(|all| all.push(status));
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}

/// A Registration service answering GetInfo with `info`, plus the record of
/// the NotifyRegistrationStatus calls it receives; for servers that combine
/// it with other services on one socket.
pub fn registration_service(
    info: PluginInfo,
) -> (
    RegistrationServer<impl Registration>,
    watch::Receiver<Vec<RegistrationStatus>>,
) {
    let (notifications, rx) = watch::channel(Vec::new());
    let service = Service {
        info,
        get_info: Arc::new(Mutex::new(GetInfoBehaviour::Answer)),
        get_info_calls: watch::channel(0).0,
        notifications,
        notify_delay: Duration::ZERO,
        notify_gate: None,
    };
    (RegistrationServer::new(service), rx)
}

/// Builder for a [`FakePlugin`].
#[derive(Debug, Clone)]
pub struct FakePluginBuilder {
    info: PluginInfo,
    get_info: GetInfoBehaviour,
    notify_delay: Duration,
    notify_gate: Option<Arc<Semaphore>>,
}

impl FakePluginBuilder {
    /// Sets the endpoint GetInfo reports.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.info.endpoint = endpoint.into();
        self
    }

    /// Sets the versions GetInfo reports.
    pub fn versions(mut self, versions: &[&str]) -> Self {
        self.info.supported_versions = versions.iter().map(|v| v.to_string()).collect();
        self
    }

    /// Sets how GetInfo behaves.
    pub fn get_info(mut self, behaviour: GetInfoBehaviour) -> Self {
        self.get_info = behaviour;
        self
    }

    /// Delays each NotifyRegistrationStatus answer.
    pub fn notify_delay(mut self, delay: Duration) -> Self {
        self.notify_delay = delay;
        self
    }

    /// Holds each NotifyRegistrationStatus (before it is recorded and
    /// answered) until `gate` has a permit for it.
    pub fn notify_gate(mut self, gate: Arc<Semaphore>) -> Self {
        self.notify_gate = Some(gate);
        self
    }

    /// Binds `socket` and serves until the plugin is stopped or dropped.
    pub async fn serve(self, socket: impl Into<PathBuf>) -> FakePlugin {
        let socket = socket.into();
        let bound = BoundSocket::bind(&socket, None)
            .await
            .expect("bind fake plugin socket");
        let (notifications, _) = watch::channel(Vec::new());
        let (get_info_calls, _) = watch::channel(0);
        let behaviour = Arc::new(Mutex::new(self.get_info));
        let service = Service {
            info: self.info,
            get_info: behaviour.clone(),
            get_info_calls: get_info_calls.clone(),
            notifications: notifications.clone(),
            notify_delay: self.notify_delay,
            notify_gate: self.notify_gate,
        };
        let shutdown = CancellationToken::new();
        let router =
            tonic::transport::Server::builder().add_service(RegistrationServer::new(service));
        let task = tokio::spawn(serve(bound, router, shutdown.clone()));
        FakePlugin {
            socket,
            shutdown,
            task: Some(task),
            notifications,
            get_info_calls,
            behaviour,
        }
    }
}

/// A running registration plugin.
pub struct FakePlugin {
    socket: PathBuf,
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<(), nodeplugins_api::transport::TransportError>>>,
    notifications: watch::Sender<Vec<RegistrationStatus>>,
    get_info_calls: watch::Sender<usize>,
    behaviour: Arc<Mutex<GetInfoBehaviour>>,
}

impl FakePlugin {
    /// A plugin of `plugin_type` named `name` that registers with no explicit
    /// endpoint and version `1.0.0`.
    pub fn builder(plugin_type: &str, name: &str) -> FakePluginBuilder {
        FakePluginBuilder {
            info: PluginInfo {
                r#type: plugin_type.to_string(),
                name: name.to_string(),
                endpoint: String::new(),
                supported_versions: vec!["1.0.0".to_string()],
            },
            get_info: GetInfoBehaviour::Answer,
            notify_delay: Duration::ZERO,
            notify_gate: None,
        }
    }

    /// The registration socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Every RegistrationStatus received so far, oldest first.
    pub fn notifications(&self) -> watch::Receiver<Vec<RegistrationStatus>> {
        self.notifications.subscribe()
    }

    /// How many GetInfo calls arrived.
    pub fn get_info_calls(&self) -> watch::Receiver<usize> {
        self.get_info_calls.subscribe()
    }

    /// Changes how later GetInfo calls behave.
    pub fn set_get_info(&self, behaviour: GetInfoBehaviour) {
        *self.behaviour.lock().unwrap() = behaviour;
    }

    /// Stops serving and removes the socket, as a plugin does on SIGTERM.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            task.await
                .expect("fake plugin task")
                .expect("fake plugin server");
        }
    }
}

impl Drop for FakePlugin {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
