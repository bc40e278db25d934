//! Admitting one pod, as the kubelet's container manager does it, then
//! preparing its claims, as the kubelet does before it starts the pod:
//!
//! 1. **Devices**, one pod at a time (it holds the [`GatePass`]), container
//!    by container, init containers first. A container asking for an
//!    extended resource no device plugin serves, which the Node's
//!    allocatable does not have enough of either, makes the pod wait for
//!    the plugin (the kubelet's admission refuses it: `OutOf<resource>`).
//!    Then each
//!    container's device plugin resources all or none (the device manager
//!    calls GetPreferredAllocation, Allocate and PreStartContainer). The
//!    devices of an init container that ends (not a restartable one) may
//!    be given to the containers after it. A container that holds its
//!    devices already (the agent restarted) keeps them without a call, as
//!    the kubelet does for containers that run when it restarts. A failure
//!    gives back every device of the pod: the pod is admitted whole or not
//!    at all.
//! 2. **Claims**: read from the API and checked (allocated, reserved for
//!    the pod) while the devices are allocated (a read changes nothing, and
//!    the pod is ready a round trip sooner), then, once the devices are,
//!    prepared by the DRA manager, which records them before any driver is
//!    called. Claims the records show prepared for the pod already (the
//!    agent restarted) cost neither a read nor a call.
//! 3. **What each container gets**: its allocations merged, and the CDI
//!    devices of the claims it names.
//!
//! Nothing here changes state of its own: the device manager and the DRA
//! manager decide, this asks them in the kubelet's order.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::device::{AllocateError, AllocationRequest, ContainerAllocation, DeviceHandle, OnDisk};
use crate::dra::{DraError, DraHandle, PodClaimResult};
use crate::pods::admit::claims::{PodClaimsError, PodClaimsReader, claim_names_of};
use crate::pods::admit::container::{ContainerKind, ContainerResources, container_devices};
use crate::pods::admit::spec::{self, device_requests, unserved_requests};
use crate::pods::informers::Informers;
use crate::pods::lifecycle::admission_gate::GatePass;
use crate::pods::pod::{PodClaims, PodRef};

/// Why a pod was not admitted.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AdmissionError {
    /// A container's devices could not be allocated.
    #[error("container {container}: {source}")]
    Devices {
        /// The container.
        container: String,
        /// Why.
        #[source]
        source: AllocateError,
    },
    /// The pod's claims could not be read, or may not be prepared (yet).
    #[error(transparent)]
    Claims(Arc<PodClaimsError>),
    /// The DRA manager refused to prepare the claims.
    #[error(transparent)]
    Dra(#[from] DraError),
    /// Drivers failed claims.
    #[error("{}", .0.join("; "))]
    Prepare(Vec<String>),
    /// A container asks for an extended resource that no device plugin
    /// serves and the Node's allocatable does not have enough of: the pod
    /// waits for the plugin.
    #[error(
        "Node didn't have enough resource: {resource}, requested: {requested}, used: 0, capacity: {capacity}"
    )]
    Unserved {
        /// The container.
        container: String,
        /// The resource.
        resource: String,
        /// How many the container asks for.
        requested: usize,
        /// How many the Node's allocatable has.
        capacity: usize,
    },
    /// The node's own Node is not known yet (its watch has not listed it
    /// within the request timeout): the pod waits.
    #[error("{0}")]
    NodeUnknown(String),
    /// A manager stopped: the agent is shutting down.
    #[error("the agent is stopping")]
    Stopping,
}

impl AdmissionError {
    /// Whether the pod only waits: its claims are not created, allocated
    /// or reserved for it yet, a claim is still being unprepared for pods
    /// gone, or no plugin serves a resource it asks for yet (none is
    /// registered, as after a restart until the plugin registers again, or
    /// its plugin has no healthy device yet, as between its registration
    /// and its first device list).
    /// The kubelet refuses such a pod for good; here it is admitted once
    /// the plugin is back.
    pub fn is_wait(&self) -> bool {
        match self {
            Self::Claims(e) => e.is_wait(),
            Self::Devices {
                source:
                    AllocateError::Unregistered(_)
                    | AllocateError::Stopped(_)
                    | AllocateError::NoHealthy(_),
                ..
            }
            | Self::Dra(DraError::ClaimUnpreparing { .. })
            | Self::Unserved { .. }
            | Self::NodeUnknown(_) => true,
            _ => false,
        }
    }

    /// Whether it waits for a device plugin (not registered, stopped, or
    /// no healthy device yet).
    fn is_device_wait(&self) -> bool {
        matches!(
            self,
            Self::Devices {
                source: AllocateError::Unregistered(_)
                    | AllocateError::Stopped(_)
                    | AllocateError::NoHealthy(_),
                ..
            }
        )
    }

    /// The reason of the pod's Event, as the kubelet gives it.
    pub fn reason(&self) -> String {
        match self {
            Self::Devices { .. } | Self::NodeUnknown(_) => {
                crate::pods::kube_events::UNEXPECTED_ADMISSION_ERROR.into()
            }
            Self::Unserved { resource, .. } => format!("OutOf{resource}"),
            _ => crate::pods::kube_events::FAILED_PREPARE_DYNAMIC_RESOURCES.into(),
        }
    }

    /// The message of the pod's Event, worded as the kubelet words it.
    pub fn message(&self) -> String {
        match self {
            Self::Devices { source, .. } => {
                format!("Allocate failed due to {source}, which is unexpected")
            }
            Self::Unserved { .. } | Self::NodeUnknown(_) => self.to_string(),
            other => {
                format!("Failed to prepare dynamic resources: prepare dynamic resources: {other}")
            }
        }
    }
}

/// A pod admitted.
#[derive(Debug, Clone)]
pub(crate) struct Admitted {
    /// Each container with what it got, init containers first.
    pub(crate) containers: Vec<ContainerResources>,
    /// Everything it got was held already (the agent restarted): no plugin
    /// was called.
    pub(crate) restored: bool,
}

/// How long an admission that finds a device plugin without devices yet
/// waits, holding the gate, for the device manager to change before it
/// gives up.
const DEVICE_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// What admitting needs: the managers to ask, and the API to read claims.
#[derive(Clone)]
pub(crate) struct Admitter {
    pub(crate) devices: DeviceHandle,
    pub(crate) dra: DraHandle,
    pub(crate) claims: PodClaimsReader,
    pub(crate) informers: Informers,
}

impl Admitter {
    /// Admits `pod`: each container with what it got, init containers
    /// first. Its devices are allocated with `pass` held, which is given
    /// back once they are (or once a failure gave them back). The pod's
    /// claims are read meanwhile (the read changes nothing), and prepared
    /// only once its devices are.
    pub(crate) async fn admit(
        &self,
        pod: &Pod,
        pod_ref: &PodRef,
        pass: GatePass,
        fresh: bool,
    ) -> Result<Admitted, AdmissionError> {
        if fresh {
            // What it held was set up before the runtime lost its
            // containers: set up again.
            self.devices
                .release(&pod_ref.uid)
                .await
                .map_err(|_| AdmissionError::Stopping)?;
            self.dra
                .prepare_again(Some(&pod_ref.uid))
                .await
                .map_err(|_| AdmissionError::Stopping)?;
        }
        let mut called = false;
        let devices = async {
            let mut changes = self.devices.changes();
            changes.borrow_and_update();
            let mut allocated = self.allocate_devices(pod, pod_ref).await;
            let settle = tokio::time::Instant::now() + DEVICE_SETTLE;
            // A plugin between its registration and its device list: this
            // pod, the oldest due, is the first to see them (the gate is
            // still held, so no younger pod overtakes it).
            while let Err(e) = &allocated
                && e.is_device_wait()
                && tokio::time::timeout_at(settle, changes.changed())
                    .await
                    .is_ok_and(|c| c.is_ok())
            {
                if self.devices.release(&pod_ref.uid).await.is_err() {
                    return Err(AdmissionError::Stopping);
                }
                allocated = self.allocate_devices(pod, pod_ref).await;
            }
            let allocated = match allocated {
                Ok(allocations) => Ok(allocations),
                // Admitted whole or not at all: what earlier containers got
                // goes back before the next pod is admitted (the kubelet
                // rejects the pod, which frees them).
                Err(e) => match self.devices.release(&pod_ref.uid).await {
                    Ok(_) => Err(e),
                    Err(_) => Err(AdmissionError::Stopping),
                },
            };
            // The next pod's allocation sees these already; their
            // checkpoint write is waited for without holding it up, so
            // that consecutive pods' writes share one.
            drop(pass);
            let (allocations, on_disk) = allocated?;
            called = !on_disk.is_empty();
            for (container, written) in on_disk {
                if let Err(source) = written.written().await {
                    let _ = self.devices.release(&pod_ref.uid).await;
                    return Err(AdmissionError::Devices { container, source });
                }
            }
            Ok(allocations)
        };
        let (allocations, claims) = tokio::join!(devices, self.read_claims(pod, pod_ref));
        let allocations = allocations?;
        let claims = claims?;
        let restored = !called && !matches!(claims, Claims::Read(_));
        let claims = self.prepare_claims(claims).await?;
        let containers = allocations
            .into_iter()
            .map(|(name, kind, allocations)| {
                let refs: Vec<&ContainerAllocation> = allocations.iter().map(Arc::as_ref).collect();
                let claim_cdi = claims.get(&name).cloned().unwrap_or_default();
                ContainerResources::new(&name, kind, &refs, claim_cdi)
            })
            .collect();
        Ok(Admitted {
            containers,
            restored,
        })
    }

    /// Step 1: each container's devices, in the kubelet's order.
    /// Returns them with the ends of their checkpoint writes (per container).
    #[allow(clippy::type_complexity)]
    async fn allocate_devices(
        &self,
        pod: &Pod,
        pod_ref: &PodRef,
    ) -> Result<
        (
            Vec<(String, ContainerKind, Vec<Arc<ContainerAllocation>>)>,
            Vec<(String, OnDisk)>,
        ),
        AdmissionError,
    > {
        let snapshot = self
            .devices
            .running_snapshot()
            .await
            .map_err(|_| AdmissionError::Stopping)?;
        self.check_served(pod, |r| snapshot.is_device_resource(r))
            .await?;
        // Resource → devices of ended init containers, for the containers
        // after them (the kubelet's devicesToReuse).
        let mut reusable: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut containers = Vec::new();
        let mut writes = Vec::new();
        for (container, kind) in spec::containers(pod) {
            let wanted = device_requests(pod, container, |r| snapshot.is_device_resource(r));
            let got: Vec<Arc<ContainerAllocation>> = if wanted.is_empty() {
                Vec::new()
            } else {
                // What it holds already is kept as it is: the agent
                // restarted under its running containers (a reboot, or a
                // lost sandbox, gave everything back before this).
                let mut request = AllocationRequest::new(
                    &pod_ref.uid,
                    &pod_ref.namespace,
                    &pod_ref.name,
                    &container.name,
                )
                .may_be_running();
                for (resource, count) in &wanted {
                    request = request.resource(resource, *count);
                    if let Some(devices) = reusable.get(resource) {
                        request = request.reuse(resource, devices.clone());
                    }
                }
                let (allocations, written) = self
                    .devices
                    .allocate_recorded(&request)
                    .await
                    .map_err(|source| AdmissionError::Devices {
                        container: container.name.clone(),
                        source,
                    })?;
                if written.is_new() {
                    writes.push((container.name.clone(), written));
                }
                allocations.into_iter().map(Arc::new).collect()
            };
            for allocation in &got {
                let devices = reusable.entry(allocation.resource.clone()).or_default();
                match kind {
                    ContainerKind::Init => {
                        for id in &allocation.devices {
                            if !devices.contains(id) {
                                devices.push(id.clone());
                            }
                        }
                    }
                    // A sidecar keeps its devices for the pod's life; an app
                    // container's are its own.
                    ContainerKind::Sidecar | ContainerKind::App => {
                        devices.retain(|id| !allocation.devices.contains(id));
                    }
                }
            }
            containers.push((container.name.clone(), kind, got));
        }
        Ok((containers, writes))
    }

    /// The kubelet's admission predicate for extended resources no device
    /// plugin serves (`is_device_resource` says which are served): each
    /// must be in the Node's allocatable with at least what a container
    /// asks for (the kubelet admits a resource the Node does not list at
    /// all; here the pod waits for its plugin, see the operator guide).
    /// The Node is read only when a pod asks for such a resource.
    async fn check_served(
        &self,
        pod: &Pod,
        is_device_resource: impl Fn(&str) -> bool,
    ) -> Result<(), AdmissionError> {
        let unserved: Vec<(String, String, usize)> = spec::containers(pod)
            .into_iter()
            .flat_map(|(container, _)| {
                unserved_requests(pod, container, &is_device_resource)
                    .into_iter()
                    .map(|(resource, count)| (container.name.clone(), resource, count))
            })
            .collect();
        if unserved.is_empty() {
            return Ok(());
        }
        let allocatable = self
            .informers
            .node_allocatable()
            .await
            .map_err(|e| AdmissionError::NodeUnknown(e.to_string()))?;
        for (container, resource, requested) in unserved {
            let capacity = allocatable
                .get(&resource)
                .and_then(|q| spec::quantity_value(q))
                .unwrap_or(0);
            if capacity < requested {
                return Err(AdmissionError::Unserved {
                    container,
                    resource,
                    requested,
                    capacity,
                });
            }
        }
        Ok(())
    }

    /// Step 2, first half: the pod's claims, as the records have them when
    /// they are prepared for it already, else read from the API and
    /// checked.
    async fn read_claims(&self, pod: &Pod, pod_ref: &PodRef) -> Result<Claims, AdmissionError> {
        let names = claim_names_of(pod).map_err(|e| AdmissionError::Claims(Arc::new(e)))?;
        if names.is_empty() {
            return Ok(Claims::None);
        }
        let containers: Vec<String> = spec::containers(pod)
            .into_iter()
            .map(|(c, _)| c.name.clone())
            .collect();
        if let Some((claims, results)) = self.restored(pod_ref, &names, &containers).await? {
            return Ok(Claims::Prepared(claims, results));
        }
        let claims = self
            .claims
            .read_for(pod)
            .await
            .map_err(|e| AdmissionError::Claims(Arc::new(e)))?;
        Ok(Claims::Read(claims))
    }

    /// Step 2, second half: the claims prepared; container → its CDI
    /// devices.
    async fn prepare_claims(
        &self,
        claims: Claims,
    ) -> Result<BTreeMap<String, Vec<String>>, AdmissionError> {
        let (claims, results) = match claims {
            Claims::None => return Ok(BTreeMap::new()),
            Claims::Prepared(claims, results) => (claims, results),
            Claims::Read(claims) => {
                let results = self.dra.prepare_pod(&claims.claims).await?;
                let failures: Vec<String> = results
                    .iter()
                    .filter_map(|r| {
                        let error = r.result.error.as_ref()?;
                        let claim = &r.result.claim;
                        Some(format!(
                            "ResourceClaim {}/{} with DRA driver {}: {error}",
                            claim.namespace, claim.name, r.driver
                        ))
                    })
                    .collect();
                if !failures.is_empty() {
                    return Err(AdmissionError::Prepare(failures));
                }
                (claims, results)
            }
        };
        Ok(container_devices(&claims, &results)
            .into_iter()
            .map(|c| (c.name, c.cdi_device_ids))
            .collect())
    }

    /// The pod's claims and their results as the records have them, when
    /// every claim it names (`names`) is prepared for it already.
    async fn restored(
        &self,
        pod_ref: &PodRef,
        names: &[String],
        containers: &[String],
    ) -> Result<Option<(PodClaims, Vec<PodClaimResult>)>, AdmissionError> {
        let records = self
            .dra
            .loaded_claims()
            .await
            .map_err(|_| AdmissionError::Stopping)?;
        let prepared = records.prepared_for_pod(&pod_ref.namespace, &pod_ref.uid, names);
        Ok(prepared.map(|(claims, results)| {
            (
                PodClaims {
                    pod: pod_ref.clone(),
                    containers: containers.to_vec(),
                    claims,
                },
                results,
            )
        }))
    }
}

/// A pod's claims, before they are prepared.
enum Claims {
    /// It uses none.
    None,
    /// Prepared for it already, as recorded, with their results.
    Prepared(PodClaims, Vec<PodClaimResult>),
    /// Read from the API and checked: to prepare.
    Read(PodClaims),
}
