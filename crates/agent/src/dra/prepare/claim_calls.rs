//! A prepare's and an unprepare's steps, all in the caller's task: the
//! claim book decides (it checks the claims and records them before any
//! driver is called, or says which claims a pod used last), the drivers are
//! called here, each once with all its claims and all at once, and the book
//! records what they did. Nothing goes through the manager's task, which
//! only keeps the drivers and their routes. A handle's prepare and
//! unprepare methods are these steps and nothing else.

use std::collections::{BTreeMap, HashMap, HashSet};

use tokio::time::Instant;

use crate::checkpoint::WriteDone;
use crate::common::owner::Mailbox;
use crate::dra::claim::{ClaimPod, ClaimRef, ClaimResult, PreparedClaim, UnpreparedClaim};
use crate::dra::command::{Command, Route, Shared};
use crate::dra::drivers::connection::Channel;
use crate::dra::error::{DraError, RecordError};
use crate::dra::prepare::calls::{self, Operation};
use crate::dra::prepare::claim_book::ClaimBook;
use crate::dra::prepare::pod::{PodClaim, PodClaimResult, PodClaimUnprepared};
use crate::dra::prepare::records::ClaimToPrepare;
use nodeplugins_api::call::CallError;
use nodeplugins_api::call_layer::{CallLayer, CallService};
use nodeplugins_api::dra_client::DraClient;

/// The steps of prepares and unprepares, with what a handle shares with
/// the owner (the claim book among it).
pub(in crate::dra) struct ClaimCalls<'a> {
    commands: &'a Mailbox<Command>,
    shared: &'a Shared,
}

impl<'a> ClaimCalls<'a> {
    /// The steps with `shared`; `commands` tells whether the owner runs.
    pub(in crate::dra) fn new(commands: &'a Mailbox<Command>, shared: &'a Shared) -> Self {
        Self { commands, shared }
    }

    /// `claims` prepared by `driver` (for `pod`, when named): in request
    /// order; a failed call is an error.
    pub(in crate::dra) async fn prepare_with(
        &self,
        driver: &str,
        claims: &[ClaimRef],
        pod: Option<&ClaimPod>,
    ) -> Result<Vec<PreparedClaim>, DraError> {
        self.pick(driver)?;
        let requests = claims
            .iter()
            .map(|claim| ClaimToPrepare {
                claim: claim.clone(),
                drivers: vec![driver.to_string()],
                user: pod.cloned(),
            })
            .collect();
        let done = self.run_prepare(requests).await?;
        let mut results: HashMap<String, PreparedClaim> = done
            .recorded
            .into_iter()
            .map(|(_, result)| (result.claim.uid.clone(), result))
            .collect();
        for (_, _, outcome) in done.called {
            for result in outcome? {
                results.insert(result.claim.uid.clone(), result);
            }
        }
        Ok(claims
            .iter()
            .filter_map(|claim| results.remove(&claim.uid))
            .collect())
    }

    /// A pod's claims prepared, each with every driver of its allocation:
    /// one result per claim and driver, in claim order, then driver.
    pub(in crate::dra) async fn prepare_pod(
        &self,
        claims: &[PodClaim],
    ) -> Result<Vec<PodClaimResult>, DraError> {
        let requests = claims
            .iter()
            .map(|c| ClaimToPrepare {
                claim: c.claim.clone(),
                drivers: c.drivers.clone(),
                user: Some(c.user.clone()),
            })
            .collect();
        let done = self.run_prepare(requests).await?;
        // (claim UID, driver) → result.
        let mut results: BTreeMap<(String, String), PreparedClaim> = done
            .recorded
            .into_iter()
            .map(|(driver, result)| ((result.claim.uid.clone(), driver), result))
            .collect();
        for (driver, called, outcome) in done.called {
            match outcome {
                Ok(done) => {
                    for result in done {
                        results.insert((result.claim.uid.clone(), driver.clone()), result);
                    }
                }
                Err(e) => {
                    for claim in called {
                        let failed = PreparedClaim {
                            devices: Vec::new(),
                            error: Some(e.to_string()),
                            claim,
                        };
                        results.insert((failed.claim.uid.clone(), driver.clone()), failed);
                    }
                }
            }
        }
        Ok(claims
            .iter()
            .flat_map(|claim| claim.drivers.iter().map(move |d| (claim, d)))
            .filter_map(|(claim, driver)| {
                let result = results.remove(&(claim.claim.uid.clone(), driver.clone()))?;
                Some(PodClaimResult {
                    driver: driver.clone(),
                    result,
                })
            })
            .collect())
    }

    /// A prepare's three steps: the book checks and records the claims
    /// (the caller waits until that is on disk), the drivers are called,
    /// each at once, and the book records what they prepared.
    async fn run_prepare(&self, claims: Vec<ClaimToPrepare>) -> Result<PrepareDone, DraError> {
        let book = self.book().await?;
        // Every driver must be registered before anything is recorded.
        let routes = self.shared.routes.get();
        let unregistered = claims
            .iter()
            .flat_map(|c| &c.drivers)
            .find(|driver| !routes.contains_key(*driver));
        if let Some(driver) = unregistered {
            return Err(DraError::NotRegistered(driver.clone()));
        }
        let (plan, written) = book.begin_prepare(&claims)?;
        on_disk(written).await?;
        let calls = plan.calls.into_iter().map(|(driver, claims)| async move {
            let outcome = self
                .call(&driver, &claims, Operation::Prepare, calls::prepare)
                .await;
            (driver, claims, outcome)
        });
        let called = futures::future::join_all(calls).await;
        let results: Vec<_> = called
            .iter()
            .filter_map(|(driver, _, outcome)| {
                Some((driver.clone(), outcome.as_ref().ok()?.clone()))
            })
            .collect();
        recorded(self.shared.claims.finish_prepare(&results)).await;
        Ok(PrepareDone {
            recorded: plan.recorded,
            called,
        })
    }

    /// After a reboot: the claims of pod `pod_uid` (every claim, with
    /// `None`) are prepared again by the next prepare; returns once that
    /// is on disk (a failed write is logged).
    pub(in crate::dra) async fn prepare_again(
        &self,
        pod_uid: Option<&str>,
    ) -> Result<(), DraError> {
        let written = self.book().await?.prepare_again(pod_uid);
        recorded(written).await;
        Ok(())
    }

    /// What pod `pod_uid` uses unprepared, as recorded.
    pub(in crate::dra) async fn unprepare_pod(
        &self,
        pod_uid: &str,
    ) -> Result<Vec<PodClaimUnprepared>, DraError> {
        let (plan, written) = self.book().await?.begin_unprepare(pod_uid);
        if let Err(e) = on_disk(written).await {
            // Only the pod's place among a shared claim's users changed.
            tracing::error!(error = %e, "prepared claims not recorded on disk");
        }
        // Claim UID → (claim, drivers).
        let mut claims: BTreeMap<String, (ClaimRef, Vec<String>)> = BTreeMap::new();
        for (driver, called) in &plan.calls {
            for claim in called {
                let entry = claims
                    .entry(claim.uid.clone())
                    .or_insert_with(|| (claim.clone(), Vec::new()));
                entry.1.push(driver.clone());
            }
        }
        let calls = plan.calls.iter().map(|(driver, claims)| async move {
            let outcome = self
                .call(driver, claims, Operation::Unprepare, calls::unprepare)
                .await;
            (driver, claims, outcome)
        });
        let called = futures::future::join_all(calls).await;
        // Claim UID → why each driver that failed it did.
        let mut failures: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut unprepared = Vec::new();
        for (driver, claims, outcome) in called {
            match outcome {
                Ok(results) => {
                    let mut done = Vec::new();
                    for result in results {
                        match result.error {
                            None => done.push(result.claim.uid),
                            Some(error) => failures
                                .entry(result.claim.uid)
                                .or_default()
                                .push(format!("DRA driver {driver}: {error}")),
                        }
                    }
                    unprepared.push((driver.clone(), done));
                }
                Err(e) => {
                    for claim in claims {
                        let failed = failures.entry(claim.uid.clone()).or_default();
                        failed.push(e.to_string());
                    }
                }
            }
        }
        let ended: Vec<String> = claims.keys().cloned().collect();
        recorded(self.shared.claims.finish_unprepare(&unprepared, &ended)).await;
        let shared = plan
            .shared
            .into_iter()
            .map(|(claim, drivers)| PodClaimUnprepared {
                claim,
                drivers,
                unprepared: false,
                error: None,
            });
        let mut done: Vec<PodClaimUnprepared> = claims
            .into_iter()
            .map(|(uid, (claim, drivers))| PodClaimUnprepared {
                claim,
                drivers,
                unprepared: true,
                error: failures.get(&uid).map(|f| f.join("; ")),
            })
            .chain(shared)
            .collect();
        done.sort_by(|a, b| a.claim.uid.cmp(&b.claim.uid));
        Ok(done)
    }

    /// `claims` unprepared by `driver`, and forgotten where it did.
    pub(in crate::dra) async fn unprepare(
        &self,
        driver: &str,
        claims: &[ClaimRef],
    ) -> Result<Vec<UnpreparedClaim>, DraError> {
        let results = self
            .call(driver, claims, Operation::Unprepare, calls::unprepare)
            .await?;
        let uids = results
            .iter()
            .filter(|r| r.error.is_none())
            .map(|r| r.claim.uid.clone())
            .collect();
        let unprepared = [(driver.to_string(), uids)];
        recorded(self.shared.claims.finish_unprepare(&unprepared, &[])).await;
        Ok(results)
    }

    /// `claims` unprepared by every driver that recorded each.
    pub(in crate::dra) async fn unprepare_recorded(
        &self,
        claims: &[ClaimRef],
    ) -> Vec<UnpreparedClaim> {
        let recorded = self.shared.prepared.get();
        let mut by_driver: BTreeMap<String, Vec<ClaimRef>> = BTreeMap::new();
        // Claim UID → why each driver that failed it did, in driver order.
        let mut failures: HashMap<String, Vec<String>> = HashMap::new();
        let mut unknown: HashSet<&str> = HashSet::new();
        for claim in claims {
            let mut drivers = recorded.drivers_of(&claim.uid).peekable();
            if drivers.peek().is_none() {
                unknown.insert(&claim.uid);
            }
            for record in drivers {
                by_driver
                    .entry(record.driver.clone())
                    .or_default()
                    .push(claim.clone());
            }
        }
        drop(recorded);
        for (driver, group) in by_driver {
            match self.unprepare(&driver, &group).await {
                Ok(done) => {
                    for result in done {
                        if let Some(error) = result.error {
                            let failed = failures.entry(result.claim.uid).or_default();
                            failed.push(format!("DRA driver {driver}: {error}"));
                        }
                    }
                }
                Err(e) => {
                    let error = match e {
                        // These name the driver already.
                        DraError::Call { .. } | DraError::NotRegistered(_) => e.to_string(),
                        e => format!("DRA driver {driver}: {e}"),
                    };
                    for claim in group {
                        failures.entry(claim.uid).or_default().push(error.clone());
                    }
                }
            }
        }
        claims
            .iter()
            .map(|claim| {
                let error = if unknown.contains(claim.uid.as_str()) {
                    Some("the claim is not prepared on this node; name its driver to unprepare it anyway".into())
                } else {
                    failures.get(&claim.uid).map(|failed| failed.join("; "))
                };
                UnpreparedClaim {
                    claim: claim.clone(),
                    error,
                }
            })
            .collect()
    }

    /// The claim book, once loaded; an error once the manager stopped (or
    /// was dropped before it ran).
    async fn book(&self) -> Result<&ClaimBook, DraError> {
        if self.commands.is_closed() {
            return Err(DraError::Stopping);
        }
        self.shared
            .prepared
            .wait_until_ready()
            .await
            .map_err(|_| DraError::Stopping)?;
        Ok(&self.shared.claims)
    }

    /// The instance calls for `driver` go to: its endpoint, service and channel.
    fn pick(&self, driver: &str) -> Result<Route, DraError> {
        if driver.is_empty() {
            return Err(DraError::EmptyName);
        }
        if self.commands.is_closed() {
            return Err(DraError::Stopping);
        }
        self.shared
            .routes
            .get()
            .get(driver)
            .cloned()
            .ok_or_else(|| DraError::NotRegistered(driver.into()))
    }

    /// One call to the instance in use, timed in the metrics.
    async fn call<R: ClaimResult, F>(
        &self,
        driver: &str,
        claims: &[ClaimRef],
        operation: Operation,
        call: impl FnOnce(DraClient<CallService<Channel>>, Vec<ClaimRef>) -> F,
    ) -> Result<Vec<R>, DraError>
    where
        F: Future<Output = Result<Vec<R>, CallError>>,
    {
        let Route {
            endpoint,
            service,
            channel,
            ..
        } = self.pick(driver)?;
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let policy =
            CallLayer::new("DRA driver", &endpoint).deadline(self.shared.config.call_timeout);
        let client = DraClient::new(policy.service(channel), service);
        let result = call(client, claims.to_vec()).await;
        let (code, failed) = match &result {
            Ok(claims) => (tonic::Code::Ok, claims.iter().any(ClaimResult::failed)),
            Err(error) => (error.code(), true),
        };
        let took = started.elapsed();
        self.shared
            .metrics
            .call(operation.metric_name(), driver, service, took, code, failed);
        result.map_err(|error| DraError::Call {
            driver: driver.into(),
            endpoint,
            operation: operation.rpc_name(),
            code: error.code(),
            message: error.message(),
        })
    }
}

/// What a prepare found recorded and what its calls came to.
struct PrepareDone {
    /// (driver, result) of claims prepared before.
    recorded: Vec<(String, PreparedClaim)>,
    /// Each driver called.
    called: Vec<DriverCall>,
}

/// One driver called by a prepare: the driver, its claims, and the call's
/// outcome.
type DriverCall = (String, Vec<ClaimRef>, Result<Vec<PreparedClaim>, DraError>);

/// Waits until what the drivers did is on disk; a failed write is logged
/// (the drivers did it either way) and shows as the checkpoint's problem.
async fn recorded(written: Option<WriteDone>) {
    if let Err(e) = on_disk(written).await {
        tracing::error!(error = %e, "prepared claims not recorded on disk");
    }
}

/// Waits for the write a change needs before the drivers are called.
async fn on_disk(written: Option<WriteDone>) -> Result<(), DraError> {
    match written {
        None => Ok(()),
        Some(written) => match written.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(DraError::Record(RecordError(e))),
            Err(_) => Err(DraError::Stopping),
        },
    }
}
