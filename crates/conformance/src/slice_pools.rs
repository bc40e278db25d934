//! What the scheduler's allocator makes of a DRA driver's ResourceSlices
//! (`structured` GatherPools): a pool is its slices of the newest
//! generation, usable only when all of them are there
//! (`resourceSliceCount`) and no device name repeats across them. The API
//! server validates each slice alone; nothing checks a pool whole before
//! the scheduler does.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::rule::{Report, Verdict};
use super::rules::{DRA_SLICE_DEVICE_NAMES, DRA_SLICE_POOLS_COMPLETE, DRA_SLICE_RULES, DRA_SLICES};

/// What the rules read of one ResourceSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slice {
    /// The object's name.
    pub(crate) name: String,
    /// `spec.pool.name`.
    pub(crate) pool: String,
    /// `spec.pool.generation`.
    pub(crate) generation: i64,
    /// `spec.pool.resourceSliceCount`.
    pub(crate) count: i64,
    /// The names of `spec.devices`.
    pub(crate) devices: Vec<String>,
}

/// The slices of each pool at its newest generation, by pool name: what
/// the scheduler keeps (older generations are outdated).
fn newest(slices: &[Slice]) -> BTreeMap<&str, Vec<&Slice>> {
    let mut pools: BTreeMap<&str, Vec<&Slice>> = BTreeMap::new();
    for slice in slices {
        let pool = pools.entry(slice.pool.as_str()).or_default();
        match pool.first().map(|s| s.generation) {
            Some(generation) if slice.generation < generation => {}
            Some(generation) if slice.generation > generation => *pool = vec![slice],
            _ => pool.push(slice),
        }
    }
    pools
}

/// The pools missing slices of their newest generation, each as a line.
pub(crate) fn incomplete(slices: &[Slice]) -> Vec<String> {
    newest(slices)
        .into_iter()
        .filter_map(|(pool, slices)| {
            let first = slices.first()?;
            let have = i64::try_from(slices.len()).unwrap_or(i64::MAX);
            (have != first.count).then(|| {
                format!(
                    "pool {pool:?} generation {}: {have} of {} slices",
                    first.generation, first.count
                )
            })
        })
        .collect()
}

/// The device names that repeat within a pool's newest generation, each
/// as a line naming the slices.
fn repeated_names(slices: &[Slice]) -> Vec<String> {
    let mut found = Vec::new();
    for (pool, slices) in newest(slices) {
        let mut holders: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for slice in slices {
            for device in &slice.devices {
                holders.entry(device).or_default().insert(&slice.name);
                *count.entry(device).or_default() += 1;
            }
        }
        for (device, n) in count {
            if n > 1 {
                let names: Vec<&str> = holders[device].iter().copied().collect();
                found.push(format!(
                    "pool {pool:?}: device {device:?} {n} times (slices {})",
                    names.join(", ")
                ));
            }
        }
    }
    found
}

/// Records the three slice rules for the slices `seen` (listed until the
/// pools were whole or `waited` ran out).
pub(crate) fn judge(report: &mut Report, driver: &str, seen: &[Slice], waited: Duration) {
    if seen.is_empty() {
        report.record(
            &DRA_SLICES,
            Verdict::Skip(format!(
                "no ResourceSlice of {driver} within {waited:?}: the driver publishes none (the scheduler allocates its devices only if another component publishes them)"
            )),
            waited,
        );
        report.skip_all(
            &DRA_SLICE_RULES[1..],
            "not run: no ResourceSlice of the driver (dra.slices.published)",
        );
        return;
    }
    let pools = newest(seen);
    let names: Vec<&str> = pools.keys().copied().collect();
    report.record(
        &DRA_SLICES,
        Verdict::Pass(format!(
            "{} ResourceSlices of {driver} in pools {names:?}",
            seen.len()
        )),
        waited,
    );
    let missing = incomplete(seen);
    let verdict = if missing.is_empty() {
        Verdict::Pass(format!("{} pools whole", pools.len()))
    } else {
        Verdict::Fail(format!(
            "after {waited:?}: {}; the scheduler allocates nothing from an incomplete pool",
            missing.join("; ")
        ))
    };
    report.record(&DRA_SLICE_POOLS_COMPLETE, verdict, Duration::ZERO);
    let repeated = repeated_names(seen);
    let verdict = if repeated.is_empty() {
        Verdict::Pass("every device name once per pool".into())
    } else {
        Verdict::Fail(format!(
            "{}: the scheduler takes such a pool as invalid and allocates nothing from it",
            repeated.join("; ")
        ))
    };
    report.record(&DRA_SLICE_DEVICE_NAMES, verdict, Duration::ZERO);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(name: &str, pool: &str, generation: i64, count: i64, devices: &[&str]) -> Slice {
        Slice {
            name: name.into(),
            pool: pool.into(),
            generation,
            count,
            devices: devices.iter().map(|d| d.to_string()).collect(),
        }
    }

    #[test]
    fn a_pool_is_its_newest_generation_whole() {
        let whole = [
            slice("a-1", "a", 1, 2, &["gpu-0"]),
            slice("a-2", "a", 2, 2, &["gpu-0"]),
            slice("a-3", "a", 2, 2, &["gpu-1"]),
        ];
        assert!(incomplete(&whole).is_empty(), "generation 1 is outdated");
        assert!(
            repeated_names(&whole).is_empty(),
            "{:?}",
            repeated_names(&whole)
        );
        let partial = [
            slice("a-2", "a", 2, 2, &["gpu-0"]),
            slice("b-1", "b", 1, 1, &[]),
        ];
        assert_eq!(
            incomplete(&partial),
            ["pool \"a\" generation 2: 1 of 2 slices"]
        );
    }

    #[test]
    fn a_device_name_twice_in_a_pool_is_found_with_its_slices() {
        let slices = [
            slice("s-1", "p", 1, 2, &["gpu-0", "gpu-1"]),
            slice("s-2", "p", 1, 2, &["gpu-1"]),
            slice("t-1", "q", 1, 1, &["gpu-1"]),
        ];
        assert_eq!(
            repeated_names(&slices),
            ["pool \"p\": device \"gpu-1\" 2 times (slices s-1, s-2)"]
        );
    }

    #[test]
    fn a_driver_publishing_nothing_skips_the_slice_rules() {
        let mut report = Report::default();
        judge(&mut report, "dra.example.com", &[], Duration::from_secs(1));
        assert_eq!(report.outcomes.len(), DRA_SLICE_RULES.len());
        assert!(
            report
                .outcomes
                .iter()
                .all(|o| matches!(o.verdict, Verdict::Skip(_)))
        );
    }
}
