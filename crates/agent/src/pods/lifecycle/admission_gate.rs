//! One pod's devices allocated at a time, as the kubelet admits its pods
//! one after another (`HandlePodAdditions`): each pod's allocation sees
//! what the pods admitted before it hold, its plugins never get two
//! Allocate calls at once, and GetPreferredAllocation is asked with what
//! is really still free. The owner hands the single pass to the oldest
//! due pod; the admission gives it back once its devices are allocated
//! (or given back after a failure), and its claims are prepared after
//! that, concurrently with other pods', as the kubelet's pod workers do.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The gate: one pass, held by the admission allocating devices.
#[derive(Debug)]
pub(crate) struct AdmissionGate {
    semaphore: Arc<Semaphore>,
}

/// The right to allocate one pod's devices; dropping it opens the gate.
#[derive(Debug)]
pub(crate) struct GatePass {
    _permit: OwnedSemaphorePermit,
}

impl AdmissionGate {
    /// An open gate.
    pub(crate) fn new() -> Self {
        Self {
            semaphore: Arc::new(Semaphore::new(1)),
        }
    }

    /// The pass, when no admission holds it.
    pub(crate) fn try_pass(&self) -> Option<GatePass> {
        let permit = self.semaphore.clone().try_acquire_owned().ok()?;
        Some(GatePass { _permit: permit })
    }

    /// Returns once the pass is free (it stays free: only the owner takes
    /// it, with [`try_pass`](Self::try_pass)). Cancel-safe.
    pub(crate) async fn opened(&self) {
        // The semaphore is never closed; an error would only end the wait.
        let _ = self.semaphore.acquire().await;
    }
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test with a precise location.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use futures::FutureExt;

    use super::*;

    #[tokio::test]
    async fn one_pass_at_a_time_and_the_gate_opens_when_it_is_dropped() {
        let gate = AdmissionGate::new();
        let pass = gate.try_pass().expect("the gate starts open");
        assert!(gate.try_pass().is_none(), "one admission at a time");
        assert!(
            gate.opened().now_or_never().is_none(),
            "not open while the pass is held"
        );
        drop(pass);
        tokio::time::timeout(Duration::from_secs(5), gate.opened())
            .await
            .unwrap();
        assert!(gate.try_pass().is_some(), "free again");
    }
}
