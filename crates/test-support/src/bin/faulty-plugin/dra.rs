//! The faulty DRA driver: a registration socket, DRAPlugin v1 and device
//! health, prepared claims kept in a state file, and one rule broken when
//! asked.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodeplugins_api::dra::v1 as dra;
use nodeplugins_api::dra_health::v1 as health;
use nodeplugins_api::pluginregistration::v1 as reg;
use nodeplugins_api::transport::{BoundSocket, ServerConnection, serve};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::{DEVICES, DRIVER, Stream_, async_stream};

struct Driver {
    fault: String,
    endpoint: PathBuf,
    state_file: PathBuf,
    /// Claim UID → device, while prepared.
    prepared: Mutex<BTreeMap<String, String>>,
    /// Every UID ever prepared by this instance.
    seen: Mutex<BTreeSet<String>>,
    /// UIDs a previous instance prepared, when the fault forgets them.
    lost: BTreeSet<String>,
    /// How many prepares were answered (for `different-devices-again`).
    prepares: Mutex<usize>,
    rejected: Mutex<bool>,
    busy: tokio::sync::Mutex<()>,
}

impl Driver {
    fn is(&self, fault: &str) -> bool {
        crate::has(&self.fault, fault)
    }

    fn save(&self) {
        let prepared = self.prepared.lock().map(|p| p.clone()).unwrap_or_default();
        let text = serde_json::to_string(&prepared).unwrap_or_default();
        let temp = self.state_file.with_extension("tmp");
        if std::fs::write(&temp, text).is_ok() {
            let _ = std::fs::rename(&temp, &self.state_file);
        }
    }
}

#[tonic::async_trait]
impl reg::registration_server::Registration for Driver {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        if self.is("slow-get-info") {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        if self.is("rejection-stops-get-info") && self.rejected.lock().is_ok_and(|r| *r) {
            return Err(Status::unavailable("gave up after the rejection"));
        }
        let endpoint = if self.is("relative-endpoint") {
            "plugins/faulty/dra.sock".to_string()
        } else {
            self.endpoint.display().to_string()
        };
        let versions = if self.is("bad-version") {
            vec!["v9.DRAPlugin".to_string()]
        } else if self.is("unserved-service") {
            // Lists v1beta1, which it does not serve, after v1.
            vec![
                "v1.DRAPlugin".to_string(),
                "v1beta1.DRAPlugin".to_string(),
                "v1.DRAResourceHealth".to_string(),
            ]
        } else if self.is("unserved-chosen-service") {
            // Lists v1beta1 first: the kubelet takes it.
            vec![
                "v1beta1.DRAPlugin".to_string(),
                "v1.DRAPlugin".to_string(),
                "v1.DRAResourceHealth".to_string(),
            ]
        } else {
            vec![
                "v1.DRAPlugin".to_string(),
                "v1.DRAResourceHealth".to_string(),
            ]
        };
        Ok(Response::new(reg::PluginInfo {
            r#type: if self.is("bad-type") {
                "GPUPlugin"
            } else {
                "DRAPlugin"
            }
            .into(),
            name: if self.is("bad-name") {
                "Faulty_Driver"
            } else {
                DRIVER
            }
            .into(),
            endpoint,
            supported_versions: versions,
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let registered = request.get_ref().plugin_registered;
        if !registered && self.is("exit-on-rejection") {
            // As node-driver-registrar does (`os.Exit(1)`): no answer, and
            // its sockets left behind; SIGTERM still removes them.
            std::process::exit(1);
        }
        if !registered && let Ok(mut rejected) = self.rejected.lock() {
            *rejected = true;
        }
        if registered && self.is("notify-fails") {
            return Err(Status::internal("cannot take the registration on purpose"));
        }
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

#[tonic::async_trait]
impl dra::dra_plugin_server::DraPlugin for Driver {
    async fn node_prepare_resources(
        &self,
        request: Request<dra::NodePrepareResourcesRequest>,
    ) -> Result<Response<dra::NodePrepareResourcesResponse>, Status> {
        let _held = if self.is("serial-prepare") {
            let Ok(held) = self.busy.try_lock() else {
                return Err(Status::unavailable("busy with another batch"));
            };
            tokio::time::sleep(Duration::from_millis(50)).await;
            Some(held)
        } else {
            None
        };
        let claims = request.into_inner().claims;
        if self.is("whole-call-error") && claims.iter().any(|c| c.name.starts_with("fail")) {
            return Err(Status::internal("a claim failed, so the call failed"));
        }
        let round = self.prepares.lock().map(|mut n| {
            *n += 1;
            *n
        });
        let mut answer = HashMap::new();
        for claim in &claims {
            if claim.name.starts_with("fail") {
                answer.insert(
                    claim.uid.clone(),
                    dra::NodePrepareResourceResponse {
                        error: format!("claim {} refused on purpose", claim.name),
                        ..Default::default()
                    },
                );
                continue;
            }
            let device = {
                let Ok(mut prepared) = self.prepared.lock() else {
                    return Err(Status::internal("state lock poisoned"));
                };
                let next = prepared.len() % DEVICES;
                let mut device = prepared
                    .entry(claim.uid.clone())
                    .or_insert_with(|| format!("dev-{next}"))
                    .clone();
                if self.is("different-devices-again") && round.as_ref().is_ok_and(|n| *n > 1) {
                    device = format!("dev-other-{}", round.as_ref().copied().unwrap_or(0));
                }
                device
            };
            if let Ok(mut seen) = self.seen.lock() {
                seen.insert(claim.uid.clone());
            }
            answer.insert(
                claim.uid.clone(),
                dra::NodePrepareResourceResponse {
                    devices: vec![dra::Device {
                        request_names: vec!["gpu".into()],
                        pool_name: "faulty-pool".into(),
                        device_name: device.clone(),
                        cdi_device_ids: vec![if self.is("bad-cdi-id") {
                            device.clone()
                        } else {
                            format!("{DRIVER}/gpu={device}")
                        }],
                        ..Default::default()
                    }],
                    error: String::new(),
                },
            );
        }
        if self.is("extra-claim") {
            answer.insert(
                "not-asked-for".into(),
                dra::NodePrepareResourceResponse::default(),
            );
        }
        self.save();
        if self.is("first-prepare-fails") && round.as_ref().is_ok_and(|n| *n == 1) {
            // Prepared, and answered with an error: the kubelet asks again.
            return Err(Status::unavailable("the first prepare fails on purpose"));
        }
        Ok(Response::new(dra::NodePrepareResourcesResponse {
            claims: answer,
        }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<dra::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<dra::NodeUnprepareResourcesResponse>, Status> {
        let mut answer = HashMap::new();
        let claims = request.into_inner().claims;
        let answered = if self.is("unprepare-leaves-out") {
            1
        } else {
            claims.len()
        };
        for claim in claims.into_iter().take(answered) {
            let seen = self.seen.lock().is_ok_and(|s| s.contains(&claim.uid));
            let removed = self
                .prepared
                .lock()
                .ok()
                .and_then(|mut p| p.remove(&claim.uid))
                .is_some();
            let error = if self.lost.contains(&claim.uid) {
                format!(
                    "claim {} was prepared by an earlier instance: unknown",
                    claim.uid
                )
            } else if self.is("unprepare-unknown-fails") && !seen {
                format!("claim {} is unknown", claim.uid)
            } else if self.is("unprepare-twice-fails") && seen && !removed {
                format!("claim {} is not prepared", claim.uid)
            } else {
                String::new()
            };
            answer.insert(claim.uid, dra::NodeUnprepareResourceResponse { error });
        }
        self.save();
        Ok(Response::new(dra::NodeUnprepareResourcesResponse {
            claims: answer,
        }))
    }
}

#[tonic::async_trait]
impl health::dra_resource_health_server::DraResourceHealth for Driver {
    type NodeWatchResourcesStream = Stream_<health::NodeWatchResourcesResponse>;

    async fn node_watch_resources(
        &self,
        _: Request<health::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        let silent = self.is("no-health-message");
        let first = health::NodeWatchResourcesResponse {
            devices: (0..DEVICES)
                .map(|i| health::DeviceHealth {
                    device: Some(health::DeviceIdentifier {
                        pool_name: "faulty-pool".into(),
                        device_name: format!("dev-{i}"),
                    }),
                    health: health::HealthStatus::Healthy as i32,
                    ..Default::default()
                })
                .collect(),
        };
        Ok(Response::new(async_stream(move |tx| async move {
            if !silent {
                let _ = tx.send(Ok(first)).await;
            }
            std::future::pending::<()>().await;
        })))
    }
}

pub(crate) async fn dra_driver(
    registry: &Path,
    plugin_dir: &Path,
    instance: Option<&str>,
    fault: &str,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(registry)?;
    std::fs::create_dir_all(plugin_dir)?;
    let state_file = plugin_dir.join("state.json");
    let suffix = instance.map(|i| format!("-{i}")).unwrap_or_default();
    let before: BTreeMap<String, String> = std::fs::read_to_string(&state_file)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    // This instance ran before: it is a restart.
    let started = plugin_dir.join(format!("started{suffix}"));
    let restarted = started.exists();
    std::fs::write(&started, b"")?;
    if crate::has(fault, "no-socket-on-restart") && restarted {
        // It never registers again.
        shutdown.cancelled().await;
        return Ok(());
    }
    let (prepared, lost) = if crate::has(fault, "lose-state-on-restart") {
        (BTreeMap::new(), before.keys().cloned().collect())
    } else {
        (before, BTreeSet::new())
    };
    let endpoint = plugin_dir.join(format!("dra{suffix}.sock"));
    crate::refuse_stale(fault, &registry.join(format!("{DRIVER}{suffix}-reg.sock")))?;
    let driver = Arc::new(Driver {
        fault: fault.to_string(),
        endpoint: endpoint.clone(),
        state_file,
        seen: Mutex::new(prepared.keys().cloned().collect()),
        prepared: Mutex::new(prepared),
        lost,
        prepares: Mutex::new(0),
        rejected: Mutex::new(false),
        busy: tokio::sync::Mutex::new(()),
    });
    let service = BoundSocket::bind(&endpoint, None).await?;
    let services = tonic::transport::Server::builder()
        .add_service(dra::dra_plugin_server::DraPluginServer::from_arc(
            driver.clone(),
        ))
        .add_service(
            health::dra_resource_health_server::DraResourceHealthServer::from_arc(driver.clone()),
        );
    let service_task = tokio::spawn(serve(service, services, shutdown.clone()));
    let registration =
        BoundSocket::bind(registry.join(format!("{DRIVER}{suffix}-reg.sock")), None).await?;
    let router = tonic::transport::Server::builder().add_service(
        reg::registration_server::RegistrationServer::from_arc(driver),
    );
    if crate::has(fault, "stale-socket") {
        // Leaves the registration socket behind, as a plugin that exits
        // without removing it does: the file guard is kept from removing
        // it, and connections are served as `serve` does (a Go client's
        // path-valued `:authority` accepted).
        let (listener, file) = registration.into_parts();
        std::mem::forget(file);
        let never = tokio_util::sync::CancellationToken::new();
        let incoming = tokio_stream::StreamExt::map(
            tokio_stream::wrappers::UnixListenerStream::new(listener),
            move |conn| conn.map(|stream| ServerConnection::new(stream, never.clone())),
        );
        let _ = router
            .serve_with_incoming_shutdown(incoming, shutdown.clone().cancelled_owned())
            .await;
    } else {
        let _ = serve(registration, router, shutdown.clone()).await;
    }
    let _ = service_task.await;
    Ok(())
}
