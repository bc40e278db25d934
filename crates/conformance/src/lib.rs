//! The kubelet's contract with a device plugin or DRA driver (and the
//! registration part of a CSI driver's), checked rule by rule without a
//! cluster or a kubelet. A run meets the plugin as the kubelet does: a
//! registration socket appearing in a directory it watches, or a device
//! plugin registering on the `kubelet.sock` the run serves. With
//! [`Conformance::exec`] it starts the plugin itself, and with
//! [`Conformance::restarts`] it also stops and restarts it (and its
//! `kubelet.sock`) for the rules about restarts. Each rule says PASS, FAIL
//! (with what was seen), WARN or SKIP (with why).
//!
//! Three ways to run it:
//! - in a plugin's own tests, each rule a test case of `cargo test` or
//!   nextest: [`Conformance::test_main`] in a test target with
//!   `harness = false`;
//! - [`Conformance::run`] for a [`Report`] of your own;
//! - the `nodeplugins conformance` command (the `nodeplugins-cli` crate),
//!   which prints the report as a table, JSON or JUnit XML.
//!
//! [`check`] is the short check of one registration socket that
//! `nodeplugins check` prints.
//!
//! With the `kube` feature, [`Conformance::kubeconfig`] takes the DRA
//! rules' claims from an API server; the application picks the Kubernetes
//! version (a `k8s-openapi` version feature) and kube's TLS stack.

#[cfg(feature = "kube")]
mod api_server;
mod cdi_names;
mod cdi_specs;
pub mod check;
mod claims;
mod csi;
mod deadlines;
mod device;
mod device_allocation;
mod device_list;
mod device_register;
mod dra;
mod dra_answers;
mod dra_client;
mod harness;
mod kubelet_socket;
mod plugin;
mod plugin_kind;
mod registration;
mod restarts;
mod rule;
mod rules;
mod run;
#[cfg(any(feature = "kube", test))]
mod slice_pools;
mod slices;
mod sockets;

use std::path::PathBuf;
use std::time::Duration;

pub use plugin_kind::PluginKind;
use rule::Selection;
pub use rule::{Outcome, Report, Verdict};

use deadlines::Deadlines;
use run::{Meeting, Options};

/// A conformance run: the same rules as `nodeplugins conformance`, with the
/// same options.
///
/// ```no_run
/// # async fn check() -> Result<(), nodeplugins_conformance::RunError> {
/// use nodeplugins_conformance::Conformance;
/// let report = Conformance::device_plugin("/tmp/dp-test")
///     .exec("exec target/debug/my-device-plugin --dir /tmp/dp-test")
///     .restarts(true)
///     .run()
///     .await?;
/// report.assert_conformant();
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Conformance {
    options: Options,
}

impl Conformance {
    fn meeting(meeting: Meeting) -> Self {
        Self {
            options: Options {
                meeting,
                exec: None,
                restarts: false,
                claims: None,
                #[cfg(feature = "kube")]
                kubeconfig: None,
                deadlines: Deadlines::new(None),
                restart_timeout: Duration::from_secs(30),
                selection: Selection::default(),
                cdi_dirs: Vec::new(),
                expect: None,
            },
        }
    }

    /// A device plugin registering on the `kubelet.sock` the run serves in
    /// `dir`.
    pub fn device_plugin(dir: impl Into<PathBuf>) -> Self {
        Self::meeting(Meeting::KubeletSocket(dir.into()))
    }

    /// A plugin met through its registration socket: `path` itself, or the
    /// first socket to appear in the directory `path`.
    pub fn registration(path: impl Into<PathBuf>) -> Self {
        Self::meeting(Meeting::Registry(path.into()))
    }

    /// Starts the plugin with this command line (`sh -c`, in a process
    /// group of its own) once the run is ready for it, and stops it at the
    /// end. `{instance}` in it names an instance, for the rolling-update
    /// rule.
    pub fn exec(mut self, command: impl Into<String>) -> Self {
        self.options.exec = Some(command.into());
        self
    }

    /// Also runs the restart rules.
    pub fn restarts(mut self, restarts: bool) -> Self {
        self.options.restarts = restarts;
        self
    }

    /// The DRA rules' claims, from a JSON file (as `--claims`).
    pub fn claims(mut self, file: impl Into<PathBuf>) -> Self {
        self.options.claims = Some(file.into());
        self
    }

    /// Takes the DRA rules' claims from the API server (as
    /// `--kubeconfig`): every ResourceClaim allocated to the driver, and one
    /// that does not exist, which the driver must fail alone.
    #[cfg(feature = "kube")]
    pub fn kubeconfig(mut self, file: impl Into<PathBuf>) -> Self {
        self.options.kubeconfig = Some(file.into());
        self
    }

    /// No call waits longer than `timeout` (each has the kubelet's own
    /// deadline otherwise).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.deadlines = Deadlines::new(Some(timeout));
        self
    }

    /// The directories of CDI spec files the container runtime reads (its
    /// `/etc/cdi` and `/var/run/cdi`, or where the driver is told to write
    /// them): with them, every CDI device id a DRA driver answers with must
    /// be named by a spec there, as the runtime must resolve it. Without,
    /// ids are checked for their form only.
    pub fn cdi_dirs<P: Into<PathBuf>>(mut self, dirs: impl IntoIterator<Item = P>) -> Self {
        self.options.cdi_dirs = dirs.into_iter().map(Into::into).collect();
        self
    }

    /// The type the plugin met through its registration socket must
    /// register as: a plugin of another type makes the run fail
    /// ([`RunError`]). With it, the run's rules are known before the plugin
    /// starts ([`Conformance::rule_ids`]), so that a test harness lists
    /// them without starting it.
    pub fn expect(mut self, kind: PluginKind) -> Self {
        self.options.expect = Some(kind);
        self
    }

    /// The ids of every rule the run reports, in order, when they are known
    /// before it starts: for a device plugin met on `kubelet.sock`, or one
    /// met through its registration socket with [`Conformance::expect`].
    pub fn rule_ids(&self) -> Option<Vec<&'static str>> {
        let kubelet_socket = matches!(self.options.meeting, run::Meeting::KubeletSocket(_));
        let plugin_type = match (kubelet_socket, self.options.expect) {
            (true, _) => PluginKind::DevicePlugin.plugin_type(),
            (false, Some(kind)) => kind.plugin_type(),
            (false, None) => return None,
        };
        Some(
            rules::every(kubelet_socket, plugin_type)
                .into_iter()
                .map(|rule| rule.id)
                .collect(),
        )
    }

    /// How long the plugin may take to start and to register again after
    /// a restart (30 s unless set).
    pub fn restart_timeout(mut self, timeout: Duration) -> Self {
        self.options.restart_timeout = timeout;
        self
    }

    /// Reports only these rules (ids, or prefixes ending at a dot); the
    /// others show as skipped.
    pub fn rules<S: Into<String>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        self.options.selection.only = ids.into_iter().map(Into::into).collect();
        self
    }

    /// Leaves these rules out (ids or prefixes): they are not run, and show
    /// as skipped. A rule whose findings later rules need (GetInfo's
    /// answer, the first device list, a prepare's answer, a restart) still
    /// runs, its verdict shown as skipped.
    pub fn skip<S: Into<String>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        self.options.selection.skip = ids.into_iter().map(Into::into).collect();
        self
    }

    /// Runs every rule, and returns their outcomes; an error when the run
    /// could not be made (a file that cannot be read, a socket that cannot
    /// be served), never for a plugin's failure, which is a failed rule.
    pub async fn run(self) -> Result<Report, RunError> {
        let mut report = run::run(&self.options).await.map_err(RunError)?;
        report.select(&self.options.selection);
        Ok(report)
    }
}

/// Why a conformance run could not be made (a file that cannot be read, a
/// socket that cannot be served, a plugin of another type than expected);
/// a plugin's failure is a failed rule instead.
#[derive(Debug, Clone)]
pub struct RunError(String);

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RunError {}
