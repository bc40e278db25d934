//! A DRA driver for tests: the SDK's DRA driver server with a driver whose
//! answers and failures the test controls, recording every call.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nodeplugins_sdk::dra_driver::DeviceHealth;
use nodeplugins_sdk::dra_driver::{
    ApiVersions, Claim, ClaimRef, DraDriver, DraDriverBuilder, DraDriverServer, HealthReporter,
    PrepareResults, PreparedClaim, PreparedDevice, UnprepareResults,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What the driver does; shared with the test while it runs.
#[derive(Default)]
pub struct Behaviour {
    /// Claim UIDs answered with an error.
    pub fail: BTreeSet<String>,
    /// Claim UIDs left out of the response.
    pub omit: BTreeSet<String>,
    /// Never answer prepare.
    pub hang: bool,
}

struct Driver {
    tag: String,
    behaviour: Arc<Mutex<Behaviour>>,
    calls: watch::Sender<Vec<(String, String)>>,
}

impl Driver {
    fn record<'a>(&self, operation: &str, claims: impl IntoIterator<Item = &'a ClaimRef>) {
        self.calls.send_modify(|calls| {
            for claim in claims {
                calls.push((operation.to_string(), claim.uid.to_string()));
            }
        });
    }
}

#[async_trait::async_trait]
impl DraDriver for Driver {
    async fn prepare(&self, claims: Vec<Claim>) -> PrepareResults {
        self.record("prepare", claims.iter().map(|c| &c.claim));
        let hang = self.behaviour.lock().unwrap().hang;
        if hang {
            std::future::pending::<()>().await;
        }
        let behaviour = self.behaviour.lock().unwrap();
        claims
            .into_iter()
            .map(|c| c.claim)
            .filter(|c| !behaviour.omit.contains(c.uid.as_str()))
            .map(|c| {
                let result = if behaviour.fail.contains(c.uid.as_str()) {
                    Err(format!("{} refuses {}", self.tag, c.uid).into())
                } else {
                    Ok(vec![PreparedDevice {
                        requests: vec!["req".into()],
                        pool: "pool".into(),
                        device: format!("dev-{}", c.uid),
                        cdi_device_ids: vec![format!("test.example.com/dev=dev-{}", c.uid)],
                        container_edits: None,
                        share_id: Some(format!("share-{}", self.tag)),
                        metadata: None,
                    }])
                };
                (c.uid, result)
            })
            .collect()
    }

    async fn unprepare(&self, claims: Vec<PreparedClaim>) -> UnprepareResults {
        self.record("unprepare", claims.iter().map(|c| &c.claim));
        let behaviour = self.behaviour.lock().unwrap();
        claims
            .into_iter()
            .map(|c| c.claim)
            .filter(|c| !behaviour.omit.contains(c.uid.as_str()))
            .map(|c| {
                let result = if behaviour.fail.contains(c.uid.as_str()) {
                    Err(format!("{} refuses {}", self.tag, c.uid).into())
                } else {
                    Ok(())
                };
                (c.uid, result)
            })
            .collect()
    }
}

/// How to start a fake driver.
#[derive(Clone)]
pub struct FakeDraOptions {
    /// Driver name.
    pub name: String,
    /// Rolling-update instance id, which also names the service socket.
    pub instance: Option<String>,
    /// Versions served.
    pub api_versions: ApiVersions,
    /// Serve device health.
    pub health: bool,
    /// Serve the registration socket too.
    pub register: bool,
    /// Keep the driver's record of prepared claims on disk (in its plugin
    /// directory), as a real driver does, rather than in memory.
    pub claims_on_disk: bool,
}

impl FakeDraOptions {
    /// Driver `name`, instance `instance`, both versions, no health, no registration.
    pub fn new(name: &str, instance: &str) -> Self {
        Self {
            name: name.into(),
            instance: Some(instance.into()),
            api_versions: ApiVersions::default(),
            health: false,
            register: false,
            claims_on_disk: false,
        }
    }
}

/// A running fake DRA driver.
pub struct FakeDraDriver {
    tag: String,
    root: PathBuf,
    options: FakeDraOptions,
    server: Option<DraDriverServer>,
    shutdown: CancellationToken,
    behaviour: Arc<Mutex<Behaviour>>,
    calls: watch::Sender<Vec<(String, String)>>,
    health: HealthReporter,
}

impl FakeDraDriver {
    /// Serves under the kubelet root `root` (service socket in
    /// `root/plugins/<name>/`, registration in `root/plugins_registry`).
    pub async fn start(root: &Path, options: FakeDraOptions) -> Self {
        let tag = options.instance.clone().unwrap_or_else(|| "default".into());
        let health = HealthReporter::new();
        health.set("pool", "dev-0", DeviceHealth::Healthy, "");
        let mut driver = Self {
            tag,
            root: root.to_owned(),
            options,
            server: None,
            shutdown: CancellationToken::new(),
            behaviour: Arc::new(Mutex::new(Behaviour::default())),
            calls: watch::channel(Vec::new()).0,
            health,
        };
        driver.restart().await;
        driver
    }

    /// Starts serving again (after [`stop`](Self::stop)) on the same sockets.
    pub async fn restart(&mut self) {
        let driver = Arc::new(Driver {
            tag: self.tag.clone(),
            behaviour: self.behaviour.clone(),
            calls: self.calls.clone(),
        });
        let mut builder = self
            .builder(driver)
            .api_versions(self.options.api_versions)
            .register(self.options.register);
        if self.options.health {
            builder = builder.health(self.health.clone());
        }
        self.shutdown = CancellationToken::new();
        let server = builder
            .start(self.shutdown.clone())
            .await
            .expect("start fake DRA driver");
        self.server = Some(server);
    }

    /// Stops serving and waits until both sockets are gone.
    pub async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            server
                .wait()
                .await
                .expect("fake DRA driver stopped cleanly");
        }
    }

    fn builder(&self, driver: Arc<dyn DraDriver>) -> DraDriverBuilder {
        // Calls are recorded per instance here; the agent keeps its own
        // record of prepared claims.
        let mut builder = DraDriverServer::builder(&self.options.name, driver).root_dir(&self.root);
        if !self.options.claims_on_disk {
            builder = builder.claims_in_memory();
        }
        match &self.options.instance {
            Some(instance) => builder.instance(instance),
            None => builder,
        }
    }

    /// The service socket (the endpoint to register).
    pub fn endpoint(&self) -> String {
        let driver = Arc::new(Driver {
            tag: self.tag.clone(),
            behaviour: self.behaviour.clone(),
            calls: self.calls.clone(),
        });
        self.builder(driver).service_socket().display().to_string()
    }

    /// What the driver does.
    pub fn behaviour(&self) -> std::sync::MutexGuard<'_, Behaviour> {
        self.behaviour.lock().unwrap()
    }

    /// Every (operation, claim uid) served so far.
    pub fn calls(&self) -> watch::Receiver<Vec<(String, String)>> {
        self.calls.subscribe()
    }

    /// The device health the driver reports.
    pub fn health(&self) -> &HealthReporter {
        &self.health
    }
}

impl Drop for FakeDraDriver {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
