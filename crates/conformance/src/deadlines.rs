//! How long the tool waits for each call: the kubelet's own deadline for
//! it (v1.37.2), narrowed by `--timeout` when given. Where the kubelet sets
//! none (it waits on Allocate or the first device list for as long as it
//! takes, holding the pod's admission or the node's capacity meanwhile),
//! the tool waits [`UNBOUNDED`].

use std::time::Duration;

/// GetInfo (pluginmanager operation_generator: `context.WithTimeout(ctx,
/// time.Second)`).
const GET_INFO: Duration = Duration::from_secs(1);
/// NotifyRegistrationStatus (operation_generator `notifyTimeoutDuration`).
const NOTIFY: Duration = Duration::from_secs(5);
/// Dialing a plugin's service (device manager client `dial`, plugin
/// manager `dialTimeoutDuration`).
const DIAL: Duration = Duration::from_secs(10);
/// PreStartContainer (`KubeletPreStartContainerRPCTimeoutInSecs`).
const PRE_START: Duration = Duration::from_secs(30);
/// A CSI driver's NodeGetInfo at registration (pkg/volume/csi
/// `csiTimeout`).
const CSI_CALL: Duration = Duration::from_secs(120);
/// Every DRA call (cm/dra/plugin `defaultClientCallTimeout`).
const DRA_CALL: Duration = Duration::from_secs(45);
/// The tool's bound where the kubelet sets none.
pub(crate) const UNBOUNDED: Duration = Duration::from_secs(45);

/// Each call's deadline.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Deadlines {
    /// `--timeout`: no call waits longer.
    narrow: Option<Duration>,
}

impl Deadlines {
    /// The kubelet's deadlines, none longer than `narrow` when given.
    pub(crate) const fn new(narrow: Option<Duration>) -> Self {
        Self { narrow }
    }

    fn of(self, kubelet: Duration) -> Duration {
        self.narrow.map_or(kubelet, |narrow| narrow.min(kubelet))
    }

    /// GetInfo.
    pub(crate) fn get_info(self) -> Duration {
        self.of(GET_INFO)
    }

    /// NotifyRegistrationStatus.
    pub(crate) fn notify(self) -> Duration {
        self.of(NOTIFY)
    }

    /// Dialing a service socket.
    pub(crate) fn dial(self) -> Duration {
        self.of(DIAL)
    }

    /// PreStartContainer.
    pub(crate) fn pre_start(self) -> Duration {
        self.of(PRE_START)
    }

    /// A CSI driver's NodeGetInfo.
    pub(crate) fn csi_call(self) -> Duration {
        self.of(CSI_CALL)
    }

    /// NodePrepareResources, NodeUnprepareResources, and the first message
    /// of NodeWatchResources.
    pub(crate) fn dra_call(self) -> Duration {
        self.of(DRA_CALL)
    }

    /// A device plugin call the kubelet waits on without a deadline:
    /// GetDevicePluginOptions, GetPreferredAllocation, Allocate, the first
    /// device list.
    pub(crate) fn device_call(self) -> Duration {
        self.of(UNBOUNDED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_has_the_kubelets_deadline_unless_narrowed() {
        let kubelet = Deadlines::new(None);
        assert_eq!(kubelet.get_info(), Duration::from_secs(1));
        assert_eq!(kubelet.pre_start(), Duration::from_secs(30));
        assert_eq!(kubelet.dra_call(), Duration::from_secs(45));
        assert_eq!(kubelet.device_call(), UNBOUNDED);
        let narrowed = Deadlines::new(Some(Duration::from_secs(2)));
        assert_eq!(narrowed.pre_start(), Duration::from_secs(2));
        assert_eq!(narrowed.dra_call(), Duration::from_secs(2));
        // Never wider than the kubelet's.
        assert_eq!(narrowed.get_info(), Duration::from_secs(1));
    }
}
