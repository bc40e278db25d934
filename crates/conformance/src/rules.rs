//! The rules, each with the upstream behaviour it stands for. Ids are
//! stable: CI configurations and JUnit reports name them.

use super::rule::Rule;

// Registration, every type (a registration socket the plugin watcher meets).

pub(crate) const REG_GET_INFO: Rule = Rule {
    id: "registration.get-info",
    statement: "GetInfo answers within 1 s",
    upstream: "pkg/kubelet/pluginmanager/operationexecutor: GetInfo is called with a 1 s deadline; a plugin that misses it is not registered",
};
pub(crate) const REG_TYPE: Rule = Rule {
    id: "registration.type",
    statement: "the type is CSIPlugin, DevicePlugin or DRAPlugin",
    upstream: "pluginmanager reconciler: a type without a handler fails with \"no handler registered for plugin type\"",
};
pub(crate) const REG_NAME: Rule = Rule {
    id: "registration.name",
    statement: "the name follows the type's rule: an extended resource name, a CSI driver name (FAIL); a DNS subdomain for DRA (WARN)",
    upstream: "device plugin handler ValidatePlugin (IsExtendedResourceName); CSI RegisterPlugin's CSINode write, which the API server validates; the DRA plugin manager checks no name, the ResourceSlice and DeviceClass APIs do",
};
pub(crate) const REG_VERSIONS: Rule = Rule {
    id: "registration.versions",
    statement: "supported versions include one the kubelet speaks",
    upstream: "ValidatePlugin: CSI highest supported version, device plugin v1beta1, DRA v1 or v1beta1 service names",
};
pub(crate) const REG_ENDPOINT: Rule = Rule {
    id: "registration.endpoint",
    statement: "the endpoint is empty (the registration socket) or an absolute path to a socket that accepts connections",
    upstream: "RegisterPlugin dials the endpoint (DRA: a lazy connection checked by the first call)",
};
pub(crate) const REG_NOTIFY: Rule = Rule {
    id: "registration.notify",
    statement: "NotifyRegistrationStatus(registered=true) is answered without an error",
    upstream: "pluginmanager operation_generator RegisterPlugin: an error from the notification removes the plugin from its handler (DeRegisterPlugin) and fails the registration, which is retried",
};
pub(crate) const REG_NOTIFY_FALSE: Rule = Rule {
    id: "registration.survives-rejection",
    statement: "after NotifyRegistrationStatus(registered=false) the plugin still answers GetInfo when the kubelet retries (WARN)",
    upstream: "pluginmanager reconciler: a refused registration is retried (every second, backoff from 500 ms to about 2 min) while the socket exists; a plugin that exits on rejection is not mishandled, only not registered",
};
pub(crate) const REG_SOCKET_GONE: Rule = Rule {
    id: "registration.socket-removed-on-exit",
    statement: "the registration socket is removed when the plugin exits on SIGTERM",
    upstream: "pluginwatcher: deregistration happens only on the socket's removal (inotify); a stale socket stays registered",
};
pub(crate) const REG_SOCKET_BACK: Rule = Rule {
    id: "registration.socket-back-on-restart",
    statement: "a restarted plugin creates its registration socket again and answers GetInfo",
    upstream: "pluginwatcher: a re-created socket is registered again",
};

pub(crate) const REG_KILLED: Rule = Rule {
    id: "registration.restart-after-kill",
    statement: "a plugin killed with SIGKILL, its sockets left behind, registers again when started again",
    upstream: "a crash or the OOM killer leaves the sockets; the plugin watcher keeps the stale registration socket and retries it until it is removed, so a plugin that cannot bind its socket again is never registered again",
};

pub(crate) const REG_SECOND_INSTANCE: Rule = Rule {
    id: "registration.second-instance",
    statement: "a second instance started beside the first (a rolling update) leaves the first serving (FAIL), and registers under its own sockets (WARN)",
    upstream: "DRA plugin manager: several instances of a driver, each at its own endpoint (the same endpoint is refused), the newest connected one used (kubeletplugin.RollingUpdate); a driver that cannot run two can still be updated by stopping the old pod first",
};

// CSI drivers.

pub(crate) const CSI_NODE_INFO: Rule = Rule {
    id: "csi.node-get-info",
    statement: "NodeGetInfo answers on the endpoint with a node id",
    upstream: "pkg/volume/csi RegistrationHandler.RegisterPlugin calls NodeGetInfo (2 min) and has its node info manager write the node id into the node's CSINode and annotation, refusing an empty one (\"driverNodeID must not be empty\"); either failure unregisters the driver and fails the registration, which is retried",
};

// Device plugins.

pub(crate) const DP_REGISTER: Rule = Rule {
    id: "device.register",
    statement: "Register carries version v1beta1, a bare socket file name in the device plugin directory and an extended resource name, and the plugin serves before Register returns",
    upstream: "pkg/kubelet/cm/devicemanager server.Register: refuses another version or an invalid resource name, joins the endpoint to the directory, and dials it (10 s) and calls GetDevicePluginOptions before it answers; a plugin not yet serving is refused and not retried",
};
pub(crate) const DP_OPTIONS: Rule = Rule {
    id: "device.options",
    statement: "GetDevicePluginOptions answers (FAIL), with the options sent in Register (WARN)",
    upstream: "devicemanager PluginConnected calls GetDevicePluginOptions and fails the plugin's connection without an answer; it never reads Register's options, so options that differ only mislead other readers",
};
pub(crate) const DP_FIRST_LIST: Rule = Rule {
    id: "device.list-and-watch.first",
    statement: "ListAndWatch sends the first device list promptly",
    upstream: "the device manager reads the resource's capacity from ListAndWatch; until the first list the node shows none",
};
pub(crate) const DP_IDS: Rule = Rule {
    id: "device.list-and-watch.ids",
    statement: "device ids are non-empty and unique",
    upstream: "devicemanager genericDeviceUpdateCallback keys devices by id: a repeated id is one device, counted twice when its entries' health differs, so the node's capacity is not the plugin's list",
};
pub(crate) const DP_HEALTH: Rule = Rule {
    id: "device.list-and-watch.health",
    statement: "every device's health is Healthy or Unhealthy",
    upstream: "genericDeviceUpdateCallback: any value but pluginapi.Healthy counts as unhealthy, so a device listed as anything else is never allocatable",
};
pub(crate) const DP_TOPOLOGY: Rule = Rule {
    id: "device.list-and-watch.topology",
    statement: "a device's topology lists NUMA nodes with non-negative, unique ids (WARN)",
    upstream: "devicemanager topology_hints.go drops NUMA ids the node does not have from the hints; under the topology manager's default policy (none) the pod is admitted anyway",
};
pub(crate) const DP_PREFERRED: Rule = Rule {
    id: "device.preferred-allocation",
    statement: "GetPreferredAllocation answers (FAIL) with the asked size from the available ids, every must-include id among them (WARN)",
    upstream: "devicemanager devicesToAllocate: a failed call refuses the pod; the answer is a hint, intersected with the available devices and filled up by the kubelet",
};
pub(crate) const DP_ALLOCATE: Rule = Rule {
    id: "device.allocate",
    statement: "Allocate of one healthy device, as the kubelet asks, answers with a container response (FAIL), exactly one (WARN)",
    upstream: "devicemanager allocateContainerResources sends one ContainerAllocateRequest per call, refuses the pod on an error or no ContainerResponses, and reads ContainerResponses[0]",
};
pub(crate) const DP_ALLOCATE_RESPONSE: Rule = Rule {
    id: "device.allocate.response",
    statement: "the container response names CDI devices fully qualified (vendor/class=name) and, with --cdi-dir, each named by a CDI spec there; mounts and device nodes by absolute paths",
    upstream: "devicemanager deviceRunContainerOptions passes CDI names, mounts and device specs to the container runtime unchecked (pod_devices.go); the runtime refuses a container whose CDI device it cannot resolve or whose mount is not absolute",
};
pub(crate) const DP_ALLOCATE_UNKNOWN: Rule = Rule {
    id: "device.allocate.unknown-ids",
    statement: "Allocate refuses ids the plugin never listed (WARN)",
    upstream: "the device manager sends only ids the plugin listed healthy, so a plugin that accepts any id, or does not answer, works with it; it hides a broken caller from its author",
};
pub(crate) const DP_ALLOCATE_CONCURRENT: Rule = Rule {
    id: "device.allocate.concurrent",
    statement: "concurrent Allocate calls all answer (WARN)",
    upstream: "the kubelet admits pods one at a time (HandlePodAdditions), so the device manager never sends Allocate calls at once; a plugin that fails them works with it, and not with other callers",
};
pub(crate) const DP_STAYS_OPEN: Rule = Rule {
    id: "device.list-and-watch.stays-open",
    statement: "the ListAndWatch stream stays open while the plugin runs",
    upstream: "devicemanager PluginDisconnected: when its last plugin's stream ends, every device of the resource is marked unhealthy at once, and the resource leaves the node after 5 min",
};
pub(crate) const DP_KILLED: Rule = Rule {
    id: "device.restart-after-kill",
    statement: "a plugin killed with SIGKILL, its socket left behind, registers again when started again",
    upstream: "a crash or the OOM killer leaves the plugin's socket in the device plugin directory; the device manager marks its devices unhealthy and forgets them after 5 min unless the plugin serves and registers again",
};
pub(crate) const DP_PRE_START: Rule = Rule {
    id: "device.pre-start-container",
    statement: "PreStartContainer answers when the plugin asks for it",
    upstream: "with pre_start_required the device manager calls PreStartContainer (30 s) before every container start; an error stops the container's start",
};
pub(crate) const DP_REREGISTER: Rule = Rule {
    id: "device.kubelet-restart",
    statement: "after a kubelet restart (every socket in the directory removed, kubelet.sock made again) the plugin serves again and registers again",
    upstream: "devicemanager CleanupPluginDirectory removes every socket in the directory, the plugins' own included, before the kubelet serves kubelet.sock; a restarted kubelet knows no plugin until it registers again",
};

// DRA drivers.

pub(crate) const DRA_SERVICES: Rule = Rule {
    id: "dra.services",
    statement: "the DRAPlugin service the kubelet chooses (the first listed it knows) is served (FAIL), and every other listed one (WARN)",
    upstream: "DRA plugin manager ValidatePlugin takes the first service in the driver's list it knows and calls only that one, with no fallback; an unserved one fails every prepare",
};
pub(crate) const DRA_SLICES: Rule = Rule {
    id: "dra.slices.published",
    statement: "with an API server (--kubeconfig), the driver's ResourceSlices are there; SKIP when it publishes none",
    upstream: "the scheduler allocates a driver's devices only from the ResourceSlices of its pools (structured GatherPools); the kubeletplugin helper publishes them for its node",
};
pub(crate) const DRA_SLICE_POOLS_COMPLETE: Rule = Rule {
    id: "dra.slices.pools-complete",
    statement: "each pool's newest generation has all its resourceSliceCount slices, within the start timeout",
    upstream: "GatherPools keeps a pool's newest generation and marks it incomplete when fewer slices than resourceSliceCount are there; the allocator skips an incomplete pool and fails an allocationMode All request on it",
};
pub(crate) const DRA_SLICE_DEVICE_NAMES: Rule = Rule {
    id: "dra.slices.device-names",
    statement: "no device name repeats across the slices of a pool",
    upstream: "buildPool marks a pool invalid on a duplicate device name (validateDeviceNames) and the allocator allocates nothing from it; the API server validates each slice alone",
};
pub(crate) const DRA_PREPARE: Rule = Rule {
    id: "dra.prepare.by-uid",
    statement: "NodePrepareResources answers every claim of a batch, by UID, and no other",
    upstream: "the DRA manager fails a pod whose claim is missing from the response",
};
pub(crate) const DRA_CDI_IDS: Rule = Rule {
    id: "dra.prepare.cdi-ids",
    statement: "every prepared device's CDI ids are fully qualified (vendor/class=name) and, with --cdi-dir, named by a CDI spec the runtime reads",
    upstream: "the DRA manager keeps the CDI ids of NodePrepareResources verbatim and passes them to the container runtime unchecked (claiminfo.go); the runtime refuses a container whose CDI device it cannot resolve",
};
pub(crate) const DRA_PER_CLAIM_ERRORS: Rule = Rule {
    id: "dra.prepare.per-claim-errors",
    statement: "a claim that should fail fails (FAIL), as an error in its own entry while the call and the batch's other claims succeed (WARN)",
    upstream: "the DRA manager fails the pod's prepare alike for a per-claim error, a whole-call error or other claims failing, and retries it; the kubelet's own kubeletplugin helper fails the whole call when one claim cannot be read",
};
pub(crate) const DRA_PREPARE_AGAIN: Rule = Rule {
    id: "dra.prepare.idempotent",
    statement: "preparing a prepared claim again returns the same devices",
    upstream: "the kubelet prepares again after its restart or a failed pod start; NodePrepareResources must be idempotent",
};
pub(crate) const DRA_UNPREPARE_UNKNOWN: Rule = Rule {
    id: "dra.unprepare.unknown",
    statement: "unpreparing a claim never prepared succeeds",
    upstream: "the kubelet unprepares claims from its checkpoint that the driver may not know",
};
pub(crate) const DRA_UNPREPARE_BY_UID: Rule = Rule {
    id: "dra.unprepare.by-uid",
    statement: "NodeUnprepareResources answers every claim of a batch, by UID, and no other",
    upstream: "the DRA manager fails an unprepare that leaves claims out (\"NodeUnprepareResources skipped N ResourceClaims\") and retries it; the claims stay unpreparing and no other pod may use them",
};
pub(crate) const DRA_UNPREPARE_AGAIN: Rule = Rule {
    id: "dra.unprepare.idempotent",
    statement: "unpreparing an unprepared claim again succeeds",
    upstream: "the kubelet retries NodeUnprepareResources until it succeeds: it must be idempotent",
};
pub(crate) const DRA_CONCURRENT: Rule = Rule {
    id: "dra.prepare.concurrent",
    statement: "concurrent NodePrepareResources batches all answer (WARN)",
    upstream: "the kubelet's pod workers prepare several pods at once; a refused batch fails that pod's prepare, which is tried again 10 s later or at the pod's next update",
};
pub(crate) const DRA_HEALTH: Rule = Rule {
    id: "dra.health.first",
    statement: "NodeWatchResources opens and its messages name pool, device and a known health (FAIL); the first comes promptly (WARN)",
    upstream: "the kubelet's DRA plugin manager reads device health from the stream (KEP-4680) with no deadline on the first message, and opens an ended stream again; health stays unknown until a message comes",
};
pub(crate) const DRA_RESTART: Rule = Rule {
    id: "dra.restart.unprepare",
    statement: "a claim prepared before the driver restarts can be unprepared after it",
    upstream: "the kubelet unprepares from its checkpoint after any restart of the driver",
};

/// The rules of every plugin met through a registration socket.
pub(crate) const REGISTRATION_RULES: &[&Rule] = &[
    &REG_GET_INFO,
    &REG_TYPE,
    &REG_NAME,
    &REG_VERSIONS,
    &REG_ENDPOINT,
    &REG_NOTIFY,
    &REG_NOTIFY_FALSE,
];

/// A device plugin's rules on its own service, in order.
pub(crate) const DEVICE_SERVICE_RULES: &[&Rule] = &[
    &DP_OPTIONS,
    &DP_FIRST_LIST,
    &DP_IDS,
    &DP_HEALTH,
    &DP_TOPOLOGY,
    &DP_PREFERRED,
    &DP_ALLOCATE,
    &DP_ALLOCATE_RESPONSE,
    &DP_ALLOCATE_UNKNOWN,
    &DP_ALLOCATE_CONCURRENT,
    &DP_PRE_START,
    &DP_STAYS_OPEN,
];

/// A DRA driver's rules on claims, in order.
/// The rules on the ResourceSlices a DRA driver publishes, in order.
pub(crate) const DRA_SLICE_RULES: &[&Rule] = &[
    &DRA_SLICES,
    &DRA_SLICE_POOLS_COMPLETE,
    &DRA_SLICE_DEVICE_NAMES,
];

pub(crate) const DRA_CLAIM_RULES: &[&Rule] = &[
    &DRA_PREPARE,
    &DRA_CDI_IDS,
    &DRA_PER_CLAIM_ERRORS,
    &DRA_PREPARE_AGAIN,
    &DRA_UNPREPARE_UNKNOWN,
    &DRA_UNPREPARE_BY_UID,
    &DRA_UNPREPARE_AGAIN,
    &DRA_CONCURRENT,
];

/// Every rule a run reports, in order: for a device plugin on the tool's
/// `kubelet.sock`, or for a plugin met through its registration socket of
/// type `plugin_type` (empty when it never said).
pub(crate) fn every(kubelet_socket: bool, plugin_type: &str) -> Vec<&'static Rule> {
    use nodeplugins_api::constants::plugin_type::{CSI, DEVICE, DRA};
    let mut rules = Vec::new();
    if kubelet_socket {
        rules.push(&DP_REGISTER);
        rules.extend_from_slice(DEVICE_SERVICE_RULES);
        rules.extend_from_slice(&[&DP_REREGISTER, &DP_KILLED]);
        return rules;
    }
    rules.extend_from_slice(REGISTRATION_RULES);
    match plugin_type {
        CSI => rules.push(&CSI_NODE_INFO),
        DEVICE => rules.extend_from_slice(DEVICE_SERVICE_RULES),
        DRA => {
            rules.push(&DRA_SERVICES);
            rules.extend_from_slice(DRA_SLICE_RULES);
            rules.extend_from_slice(DRA_CLAIM_RULES);
            rules.extend_from_slice(&[&DRA_HEALTH, &REG_SECOND_INSTANCE]);
        }
        _ => {}
    }
    rules.extend_from_slice(&[&REG_SOCKET_GONE, &REG_SOCKET_BACK]);
    if plugin_type == DRA {
        rules.push(&DRA_RESTART);
    }
    rules.push(&REG_KILLED);
    rules
}
