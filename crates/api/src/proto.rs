//! Generated protobuf messages and gRPC clients and servers, one module per
//! upstream API package. The generated code is the only place lints are relaxed.

macro_rules! generated {
    ($file:literal) => {
        include!(concat!(env!("OUT_DIR"), "/", $file));
    };
}

/// Plugin registration (`pluginregistration.Registration`), served by every plugin.
pub mod pluginregistration {
    /// Version 1 of the registration API (proto package `pluginregistration`).
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rustdoc::all
    )]
    pub mod v1 {
        generated!("pluginregistration.rs");
    }
}

/// Device plugin API: `v1beta1.Registration` (served by the agent on
/// `kubelet.sock`) and `v1beta1.DevicePlugin` (served by each plugin).
pub mod deviceplugin {
    /// Version v1beta1 (proto package `v1beta1`).
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rustdoc::all
    )]
    pub mod v1beta1 {
        generated!("v1beta1.rs");
    }
}

/// Dynamic Resource Allocation node API (`DRAPlugin`), served by DRA drivers.
pub mod dra {
    /// Proto package `k8s.io.kubelet.pkg.apis.dra.v1`, advertised as `v1.DRAPlugin`.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rustdoc::all
    )]
    pub mod v1 {
        generated!("k8s.io.kubelet.pkg.apis.dra.v1.rs");
    }
    /// Proto package `k8s.io.kubelet.pkg.apis.dra.v1beta1`, advertised as `v1beta1.DRAPlugin`.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rustdoc::all
    )]
    pub mod v1beta1 {
        generated!("k8s.io.kubelet.pkg.apis.dra.v1beta1.rs");
    }
}

/// DRA device health API (`DRAResourceHealth`), served by DRA drivers that report health.
pub mod dra_health {
    /// Proto package `v1alpha1`, advertised as `v1alpha1.DRAResourceHealth`.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rustdoc::all
    )]
    pub mod v1alpha1 {
        generated!("v1alpha1.rs");
    }
    /// Proto package `v1`, advertised as `v1.DRAResourceHealth`.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rustdoc::all
    )]
    pub mod v1 {
        generated!("v1.rs");
    }
}

/// Container Storage Interface: Identity and the node-registration part of Node.
pub mod csi {
    /// Proto package `csi.v1`.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rustdoc::all
    )]
    pub mod v1 {
        generated!("csi.v1.rs");
    }
}

/// The pod-resources API (`PodResourcesLister`), served by the agent on
/// `<root>/pod-resources/kubelet.sock` for monitoring agents.
pub mod podresources {
    /// Proto package `v1`, service `v1.PodResourcesLister`.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rustdoc::all
    )]
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/podresources/v1.rs"));
    }
    /// Proto package `v1alpha1`, service `v1alpha1.PodResourcesLister`
    /// (`List` with devices only).
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rustdoc::all
    )]
    pub mod v1alpha1 {
        include!(concat!(env!("OUT_DIR"), "/podresources/v1alpha1.rs"));
    }
}

/// The Container Runtime Interface, which the agent calls to run pods on a
/// container runtime such as containerd.
pub mod cri {
    /// Proto package `runtime.v1`: `RuntimeService` and `ImageService`.
    #[allow(
        missing_docs,
        unreachable_pub,
        clippy::all,
        clippy::pedantic,
        rustdoc::all
    )]
    pub mod v1 {
        generated!("runtime.v1.rs");
    }
}
