//! The rules on the ResourceSlices a DRA driver publishes, read from the
//! API server the run was given (`--kubeconfig`, with the `kube` feature)
//! and judged as the scheduler reads them ([`super::slice_pools`]).

#[cfg(feature = "kube")]
use std::time::Duration;

use super::rule::Report;
use super::rules::DRA_SLICE_RULES;
#[cfg(feature = "kube")]
use super::slice_pools::{Slice, incomplete, judge};

/// The slice rules, with the API server `client` when the run has one:
/// the driver's ResourceSlices are listed until every pool is whole or
/// `timeout` passes (a driver publishes its slices one by one).
#[cfg(feature = "kube")]
pub(crate) async fn rules(
    report: &mut Report,
    client: Option<&kube::Client>,
    driver: &str,
    timeout: Duration,
) {
    use k8s_openapi::api::resource::v1::ResourceSlice;

    /// How often the slices are listed again while a pool is incomplete.
    const POLL: Duration = Duration::from_millis(200);

    let Some(client) = client else {
        report.skip_all(
            DRA_SLICE_RULES,
            "no API server to read them from (--kubeconfig)",
        );
        return;
    };
    let api: kube::Api<ResourceSlice> = kube::Api::all(client.clone());
    let params = kube::api::ListParams::default().fields(&format!("spec.driver={driver}"));
    let start = tokio::time::Instant::now();
    let seen = loop {
        let listed = match api.list(&params).await {
            Ok(listed) => listed,
            Err(e) => {
                let why = format!("list ResourceSlices: {e}");
                report.skip_all(DRA_SLICE_RULES, &why);
                return;
            }
        };
        let seen: Vec<Slice> = listed
            .items
            .into_iter()
            .map(|slice| Slice {
                name: slice.metadata.name.unwrap_or_default(),
                pool: slice.spec.pool.name,
                generation: slice.spec.pool.generation,
                count: slice.spec.pool.resource_slice_count,
                devices: slice
                    .spec
                    .devices
                    .into_iter()
                    .flatten()
                    .map(|d| d.name)
                    .collect(),
            })
            .collect();
        if (!seen.is_empty() && incomplete(&seen).is_empty()) || start.elapsed() >= timeout {
            break seen;
        }
        tokio::time::sleep(POLL).await;
    };
    judge(report, driver, &seen, start.elapsed());
}

/// Without the `kube` feature there is no API server to read slices from.
#[cfg(not(feature = "kube"))]
pub(crate) fn rules(report: &mut Report) {
    report.skip_all(
        DRA_SLICE_RULES,
        "built without the kube feature: no API server to read them from",
    );
}
