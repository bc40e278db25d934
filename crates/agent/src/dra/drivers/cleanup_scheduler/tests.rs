// Test code: a failed unwrap is a failed test with a precise location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::time::Duration;

use super::*;

const GRACE: Duration = Duration::from_secs(30);
const TIMEOUT: Duration = Duration::from_secs(10);

/// A hook that records its calls and answers as told.
#[derive(Default)]
struct Hook {
    calls: Mutex<Vec<String>>,
    fail: std::sync::atomic::AtomicBool,
    hang: std::sync::atomic::AtomicBool,
}

#[derive(Debug, thiserror::Error)]
#[error("the API server said no")]
struct Refused;

#[async_trait::async_trait]
impl DriverCleanup for Hook {
    async fn driver_gone(&self, driver: &str) -> Result<(), CleanupError> {
        self.calls.lock().unwrap().push(driver.to_string());
        if self.hang.load(std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(CleanupError(Box::new(Refused)));
        }
        Ok(())
    }
}

fn scheduler() -> (CleanupScheduler, Arc<Hook>, Drivers) {
    let hook = Arc::new(Hook::default());
    let mut drivers = Drivers::new();
    drivers.insert("gpu".into(), Driver::default());
    (CleanupScheduler::new(hook.clone(), GRACE), hook, drivers)
}

async fn next_done(scheduler: &mut CleanupScheduler) -> CleanupDone {
    tokio::time::timeout(TIMEOUT, scheduler.next_done())
        .await
        .expect("a hook call to end")
}

#[tokio::test]
async fn an_unusable_driver_is_due_after_the_grace_period_keeps_its_deadline_and_a_usable_one_cancels_it()
 {
    let (mut scheduler, _hook, mut drivers) = scheduler();
    let t0 = Instant::now();
    let change = scheduler.reschedule(&mut drivers, "gpu", false, t0);
    assert!(
        matches!(change, Some(Rescheduled::Scheduled { grace, .. }) if grace == GRACE),
        "{change:?}"
    );
    assert_eq!(scheduler.next_due(&drivers), Some(t0 + GRACE));

    // Still unusable a moment later: the deadline stays.
    let later = t0 + Duration::from_secs(5);
    assert_eq!(
        scheduler.reschedule(&mut drivers, "gpu", false, later),
        None
    );
    assert_eq!(scheduler.next_due(&drivers), Some(t0 + GRACE));
    assert!(!scheduler.start_due(&mut drivers, later), "not due yet");

    assert_eq!(
        scheduler.reschedule(&mut drivers, "gpu", true, later),
        Some(Rescheduled::Cancelled)
    );
    assert_eq!(scheduler.next_due(&drivers), None, "nothing falls due");
    assert!(!scheduler.start_due(&mut drivers, t0 + GRACE));
}

#[tokio::test]
async fn a_due_cleanup_calls_the_hook_once_and_success_ends_it() {
    let (mut scheduler, hook, mut drivers) = scheduler();
    let t0 = Instant::now();
    scheduler.reschedule(&mut drivers, "gpu", false, t0);
    assert!(scheduler.start_due(&mut drivers, t0 + GRACE));
    assert_eq!(
        scheduler.next_due(&drivers),
        None,
        "a running call is not due"
    );
    assert!(
        !scheduler.start_due(&mut drivers, t0 + GRACE * 2),
        "called once"
    );

    let done = next_done(&mut scheduler).await;
    let finished = scheduler.finish(&mut drivers, done, t0 + GRACE);
    assert!(
        matches!(finished, Some(Finished::CleanedUp)),
        "{finished:?}"
    );
    assert_eq!(*hook.calls.lock().unwrap(), ["gpu"]);
    // No instance and nothing pending: the driver is forgotten.
    assert!(!drivers.contains_key("gpu"));
}

#[tokio::test]
async fn a_driver_cleaned_up_is_not_scheduled_again_until_it_was_usable() {
    let (mut scheduler, _hook, mut drivers) = scheduler();
    let t0 = Instant::now();
    drivers.get_mut("gpu").unwrap().cleaned_up_at = Some(SystemTime::now());
    assert_eq!(scheduler.reschedule(&mut drivers, "gpu", false, t0), None);
    assert_eq!(scheduler.next_due(&drivers), None);
    // Usable again clears the mark; the next loss schedules a cleanup.
    scheduler.reschedule(&mut drivers, "gpu", true, t0);
    drivers.insert("gpu".into(), Driver::default());
    assert!(matches!(
        scheduler.reschedule(&mut drivers, "gpu", false, t0),
        Some(Rescheduled::Scheduled { .. })
    ));
}

#[tokio::test]
async fn a_failed_cleanup_keeps_its_error_and_is_retried_on_the_backoff() {
    let (mut scheduler, hook, mut drivers) = scheduler();
    hook.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    let t0 = Instant::now();
    scheduler.reschedule(&mut drivers, "gpu", false, t0);
    scheduler.start_due(&mut drivers, t0 + GRACE);
    let done = next_done(&mut scheduler).await;
    let at = t0 + GRACE;
    let Some(Finished::Failed { error, retry_in }) = scheduler.finish(&mut drivers, done, at)
    else {
        panic!("the failure is reported");
    };
    assert_eq!(error.to_string(), "the API server said no");
    assert!(error.0.is::<Refused>(), "the hook's own error is kept");
    // The first retry's delay, up to a fifth longer (jitter).
    let base = CLEANUP_RETRY.base_delay(1);
    assert!(
        retry_in >= base && retry_in <= base.mul_f64(1.2),
        "{retry_in:?}"
    );
    let pending = drivers["gpu"].cleanup.as_ref().unwrap();
    assert_eq!(pending.retry.failures(), 1);
    assert_eq!(
        pending.retry.last_error().unwrap().to_string(),
        "the API server said no"
    );
    assert_eq!(scheduler.next_due(&drivers), Some(at + retry_in));

    // The retry succeeds.
    hook.fail.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(scheduler.start_due(&mut drivers, at + retry_in));
    let done = next_done(&mut scheduler).await;
    assert!(matches!(
        scheduler.finish(&mut drivers, done, at + retry_in),
        Some(Finished::CleanedUp)
    ));
    assert_eq!(hook.calls.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_cleanup_cancelled_while_its_call_runs_is_aborted_and_a_late_end_is_ignored() {
    let (mut scheduler, hook, mut drivers) = scheduler();
    hook.hang.store(true, std::sync::atomic::Ordering::SeqCst);
    let t0 = Instant::now();
    scheduler.reschedule(&mut drivers, "gpu", false, t0);
    let first_id = drivers["gpu"].cleanup.as_ref().unwrap().id;
    scheduler.start_due(&mut drivers, t0 + GRACE);
    // Keep the driver (as an instance would) while it becomes usable.
    assert_eq!(
        scheduler.reschedule(&mut drivers, "gpu", true, t0 + GRACE),
        Some(Rescheduled::Cancelled)
    );
    drivers.insert("gpu".into(), Driver::default());
    // Unusable again: a new cleanup; the old call's end does not touch it.
    scheduler.reschedule(&mut drivers, "gpu", false, t0 + GRACE);
    let late = ("gpu".to_string(), first_id, Ok(()));
    assert!(scheduler.finish(&mut drivers, late, t0 + GRACE).is_none());
    assert!(drivers["gpu"].cleanup.is_some(), "the new cleanup stays");
    // The aborted call never ends as done.
    let ended = tokio::time::timeout(Duration::from_millis(50), scheduler.next_done()).await;
    assert!(ended.is_err(), "an aborted call is no result");
}

#[tokio::test]
async fn an_entry_left_by_a_cancelled_cleanup_is_skipped() {
    let (mut scheduler, _hook, mut drivers) = scheduler();
    let t0 = Instant::now();
    scheduler.reschedule(&mut drivers, "gpu", false, t0);
    scheduler.reschedule(&mut drivers, "gpu", true, t0);
    drivers.insert("gpu".into(), Driver::default());
    let t1 = t0 + Duration::from_secs(10);
    scheduler.reschedule(&mut drivers, "gpu", false, t1);
    assert_eq!(scheduler.next_due(&drivers), Some(t1 + GRACE));
    assert!(
        !scheduler.start_due(&mut drivers, t0 + GRACE),
        "the old deadline is gone"
    );
}
