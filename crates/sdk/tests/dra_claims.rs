//! The SDK's record of prepared claims, over real sockets: a record that
//! cannot be written fails its claims (before the driver is called, and
//! after), concurrent calls without serialization each keep their record,
//! serialized calls made at once are served in batches that share the
//! driver's calls and the record's writes, with none failing, unprepare is
//! told what is known, and a claim prepared before a reboot is prepared
//! again (the driver told what it had).

// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use nodeplugins_api::dra::v1;
use nodeplugins_api::dra::v1::dra_plugin_client::DraPluginClient;
use nodeplugins_api::transport::dial;
use nodeplugins_sdk::dra_driver::{
    Claim, DraDriver, DraDriverServer, PrepareResults, PreparedClaim, PreparedDevice,
    PreparedState, STORE_BACKUP_FILE, UnprepareResults,
};
use nodeplugins_test_support::wait::TIMEOUT;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

const DRIVER: &str = "gpu.example.com";

/// Gives each claim one device named after its UID; remembers every call.
/// A claim whose name starts with `slow` waits at the gate: its arrival is
/// counted in `entered`, and it goes on when the gate opens.
#[derive(Default)]
struct Driver {
    prepared: Mutex<Vec<String>>,
    /// What each claim prepared again after a reboot had before it.
    before_reboot: Mutex<HashMap<String, Vec<PreparedDevice>>>,
    unprepared: Mutex<Vec<PreparedClaim>>,
    entered: Option<watch::Sender<u32>>,
    gate: Arc<Notify>,
    /// How long each prepare and unprepare call works.
    work: std::time::Duration,
    /// How many prepare and unprepare calls the driver got.
    calls: std::sync::atomic::AtomicUsize,
}

impl Driver {
    fn gated() -> (Self, watch::Receiver<u32>) {
        let (entered, arrivals) = watch::channel(0);
        let driver = Self {
            entered: Some(entered),
            ..Default::default()
        };
        (driver, arrivals)
    }
}

#[nodeplugins_sdk::async_trait]
impl DraDriver for Driver {
    async fn prepare(&self, claims: Vec<Claim>) -> PrepareResults {
        if claims.iter().any(|c| c.claim.name.starts_with("slow"))
            && let Some(entered) = &self.entered
        {
            let gate = self.gate.notified();
            entered.send_modify(|n| *n += 1);
            gate.await;
        }
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(self.work).await;
        let mut results = HashMap::new();
        for claim in claims {
            let uid = claim.claim.uid;
            self.prepared.lock().unwrap().push(uid.to_string());
            if let Some(before) = claim.before_reboot {
                self.before_reboot
                    .lock()
                    .unwrap()
                    .insert(uid.to_string(), before);
            }
            let device = PreparedDevice {
                pool: "pool".into(),
                device: format!("dev-{uid}"),
                cdi_device_ids: vec![format!("{DRIVER}/gpu=dev-{uid}")],
                ..Default::default()
            };
            results.insert(uid, Ok(vec![device]));
        }
        results
    }

    async fn unprepare(&self, claims: Vec<PreparedClaim>) -> UnprepareResults {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(self.work).await;
        let mut results = HashMap::new();
        for claim in claims {
            results.insert(claim.claim.uid.clone(), Ok(()));
            self.unprepared.lock().unwrap().push(claim);
        }
        results
    }
}

fn claim(name: &str) -> v1::Claim {
    v1::Claim {
        namespace: "ns".into(),
        uid: format!("uid-{name}"),
        name: name.into(),
    }
}

async fn client(server: &DraDriverServer) -> DraPluginClient<tonic::transport::Channel> {
    DraPluginClient::new(dial(server.service_socket(), TIMEOUT).await.unwrap())
}

async fn prepare(
    client: &mut DraPluginClient<tonic::transport::Channel>,
    names: &[&str],
) -> HashMap<String, v1::NodePrepareResourceResponse> {
    let request = v1::NodePrepareResourcesRequest {
        claims: names.iter().map(|n| claim(n)).collect(),
    };
    tokio::time::timeout(TIMEOUT, client.node_prepare_resources(request))
        .await
        .unwrap()
        .unwrap()
        .into_inner()
        .claims
}

async fn unprepare(
    client: &mut DraPluginClient<tonic::transport::Channel>,
    names: &[&str],
) -> HashMap<String, v1::NodeUnprepareResourceResponse> {
    let request = v1::NodeUnprepareResourcesRequest {
        claims: names.iter().map(|n| claim(n)).collect(),
    };
    tokio::time::timeout(TIMEOUT, client.node_unprepare_resources(request))
        .await
        .unwrap()
        .unwrap()
        .into_inner()
        .claims
}

/// A running server, stopped on [`Running::stop`].
struct Running {
    server: DraDriverServer,
    shutdown: CancellationToken,
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(TIMEOUT, self.server.wait())
            .await
            .unwrap()
            .unwrap();
    }
}

async fn start(root: &Path, driver: Arc<Driver>, serialize: bool) -> Running {
    start_on_boot(root, driver, serialize, "boot-1").await
}

/// As [`start`], on the machine's boot `boot`.
async fn start_on_boot(root: &Path, driver: Arc<Driver>, serialize: bool, boot: &str) -> Running {
    let shutdown = CancellationToken::new();
    let server = DraDriverServer::builder(DRIVER, driver)
        .root_dir(root)
        .register(false)
        .serialize(serialize)
        .boot_id(boot)
        .start(shutdown.clone())
        .await
        .unwrap();
    Running { server, shutdown }
}

/// Makes every change of the record fail: its backup's name is taken by a
/// directory that is not empty, which can be neither read nor replaced.
fn block_writes(root: &Path) -> std::path::PathBuf {
    let blocker = root.join(format!("plugins/{DRIVER}/{STORE_BACKUP_FILE}"));
    let _ = std::fs::remove_file(&blocker);
    std::fs::create_dir_all(blocker.join("keep")).unwrap();
    blocker
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_that_cannot_be_recorded_before_preparing_fails_and_the_driver_is_not_called() {
    let root = tempfile::tempdir().unwrap();
    let driver = Arc::new(Driver::default());
    let running = start(root.path(), driver.clone(), true).await;
    let mut client = client(&running.server).await;
    let blocker = block_writes(root.path());

    let results = prepare(&mut client, &["c1"]).await;
    let error = &results["uid-c1"].error;
    assert!(
        error.starts_with("cannot record the claim before preparing it"),
        "{error}"
    );
    assert!(results["uid-c1"].devices.is_empty());
    assert!(driver.prepared.lock().unwrap().is_empty(), "not called");

    // Once the record can be written, the claim is prepared.
    std::fs::remove_dir_all(blocker).unwrap();
    let results = prepare(&mut client, &["c1"]).await;
    assert_eq!(results["uid-c1"].error, "");
    assert_eq!(results["uid-c1"].devices[0].device_name, "dev-uid-c1");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prepared_claim_whose_answer_cannot_be_recorded_fails_and_unprepare_still_releases_it() {
    let root = tempfile::tempdir().unwrap();
    let (driver, mut arrivals) = Driver::gated();
    let driver = Arc::new(driver);
    let running = start(root.path(), driver.clone(), true).await;
    let client = client(&running.server).await;

    // The record is written before the driver is called; the driver's
    // answer cannot be.
    let call = {
        let mut client = client.clone();
        tokio::spawn(async move { prepare(&mut client, &["slow"]).await })
    };
    tokio::time::timeout(TIMEOUT, arrivals.wait_for(|n| *n == 1))
        .await
        .unwrap()
        .unwrap();
    let blocker = block_writes(root.path());
    driver.gate.notify_one();
    let results = call.await.unwrap();
    let error = &results["uid-slow"].error;
    assert!(
        error.starts_with("prepared, but the record could not be written"),
        "{error}"
    );
    std::fs::remove_dir_all(blocker).unwrap();

    // A restart later, unprepare is told the prepare was interrupted.
    drop(client);
    running.stop().await;
    let restarted = Arc::new(Driver::default());
    let running = start(root.path(), restarted.clone(), true).await;
    let mut client = self::client(&running.server).await;
    let results = unprepare(&mut client, &["slow"]).await;
    assert_eq!(results["uid-slow"].error, "");
    let unprepared = restarted.unprepared.lock().unwrap().clone();
    assert_eq!(unprepared.len(), 1);
    assert_eq!(unprepared[0].state, PreparedState::Interrupted);
    // And nothing is left recorded.
    unprepare(&mut client, &["slow"]).await;
    assert_eq!(
        restarted.unprepared.lock().unwrap()[1].state,
        PreparedState::Unknown
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_that_are_not_serialized_each_keep_their_record() {
    let root = tempfile::tempdir().unwrap();
    let (driver, mut arrivals) = Driver::gated();
    let driver = Arc::new(driver);
    let running = start(root.path(), driver.clone(), false).await;
    let client = client(&running.server).await;

    // A slow prepare loads the record, then waits in the driver while a
    // quick one is prepared and recorded.
    let slow = {
        let mut client = client.clone();
        tokio::spawn(async move { prepare(&mut client, &["slow"]).await })
    };
    tokio::time::timeout(TIMEOUT, arrivals.wait_for(|n| *n == 1))
        .await
        .unwrap()
        .unwrap();
    let quick = prepare(&mut client.clone(), &["quick"]).await;
    assert_eq!(quick["uid-quick"].error, "");
    driver.gate.notify_one();
    assert_eq!(slow.await.unwrap()["uid-slow"].error, "");

    // Both are recorded: prepared again after a restart, neither reaches
    // the driver.
    drop(client);
    running.stop().await;
    let restarted = Arc::new(Driver::default());
    let running = start(root.path(), restarted.clone(), false).await;
    let mut client = self::client(&running.server).await;
    let again = prepare(&mut client, &["slow", "quick"]).await;
    assert_eq!(again["uid-slow"].devices[0].device_name, "dev-uid-slow");
    assert_eq!(again["uid-quick"].devices[0].device_name, "dev-uid-quick");
    assert!(
        restarted.prepared.lock().unwrap().is_empty(),
        "both answered from the record"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_reboot_a_prepared_claim_is_prepared_again_with_what_it_got_before() {
    let root = tempfile::tempdir().unwrap();
    let driver = Arc::new(Driver::default());
    let prepared = |driver: &Driver| driver.prepared.lock().unwrap().len();
    let running = start_on_boot(root.path(), driver.clone(), true, "boot-1").await;
    prepare(&mut client(&running.server).await, &["a"]).await;
    running.stop().await;

    // Restarted during the same boot: answered from the record.
    let running = start_on_boot(root.path(), driver.clone(), true, "boot-1").await;
    let answer = prepare(&mut client(&running.server).await, &["a"]).await;
    assert_eq!(answer["uid-a"].devices[0].device_name, "dev-uid-a");
    assert_eq!(prepared(&driver), 1);
    running.stop().await;

    // After a reboot: the driver prepares it again, told what it had.
    let running = start_on_boot(root.path(), driver.clone(), true, "boot-2").await;
    let mut c = client(&running.server).await;
    let answer = prepare(&mut c, &["a"]).await;
    assert_eq!(answer["uid-a"].error, "");
    assert_eq!(prepared(&driver), 2);
    let before = driver.before_reboot.lock().unwrap()["uid-a"].clone();
    assert_eq!(before[0].device, "dev-uid-a");
    // From then on, from the record of this boot.
    prepare(&mut c, &["a"]).await;
    assert_eq!(prepared(&driver), 2);
    let released = unprepare(&mut c, &["a"]).await;
    assert_eq!(released["uid-a"].error, "");
    let unprepared = driver.unprepared.lock().unwrap()[0].clone();
    assert_eq!(unprepared.state, PreparedState::Prepared);
    assert_eq!(unprepared.boot_id.as_deref(), Some("boot-2"));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_serialized_prepares_and_unprepares_at_once_all_succeed_in_shared_batches() {
    let root = tempfile::tempdir().unwrap();
    // Each driver call takes 20 ms: a hundred one after another would take
    // two seconds and a hundred calls.
    let driver = Arc::new(Driver {
        work: std::time::Duration::from_millis(20),
        ..Default::default()
    });
    let calls = |driver: &Driver| driver.calls.load(std::sync::atomic::Ordering::Relaxed);
    let running = start(root.path(), driver.clone(), true).await;
    let client = client(&running.server).await;
    let names: Vec<String> = (0..100).map(|i| format!("c{i}")).collect();
    let prepares = names.iter().map(|name| {
        let mut client = client.clone();
        let name = name.clone();
        async move { prepare(&mut client, &[name.as_str()]).await }
    });
    for (name, answer) in names.iter().zip(futures::future::join_all(prepares).await) {
        let result = &answer[&format!("uid-{name}")];
        assert_eq!(result.error, "", "{name}");
        assert_eq!(result.devices[0].device_name, format!("dev-uid-{name}"));
    }
    let prepare_calls = calls(&driver);
    assert!(prepare_calls < 50, "{prepare_calls} driver calls for 100");

    // Prepared again: all from the record. Then all unprepared at once.
    let again = prepare(&mut client.clone(), &["c0", "c99"]).await;
    assert_eq!(again.len(), 2);
    assert_eq!(calls(&driver), prepare_calls);
    let unprepares = names.iter().map(|name| {
        let mut client = client.clone();
        let name = name.clone();
        async move { unprepare(&mut client, &[name.as_str()]).await }
    });
    for answer in futures::future::join_all(unprepares).await {
        assert!(answer.values().all(|r| r.error.is_empty()), "{answer:?}");
    }
    let unprepare_calls = calls(&driver) - prepare_calls;
    assert!(
        unprepare_calls < 50,
        "{unprepare_calls} driver calls for 100"
    );
    let released: std::collections::BTreeSet<String> = driver
        .unprepared
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.claim.uid.to_string())
        .collect();
    assert_eq!(released.len(), 100);
    // Nothing is left recorded: preparing again reaches the driver.
    let before = calls(&driver);
    prepare(&mut client.clone(), &["c0"]).await;
    assert_eq!(calls(&driver), before + 1);
    running.stop().await;
}
