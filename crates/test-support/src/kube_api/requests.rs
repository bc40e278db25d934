//! The API server's own count of the requests it served
//! (`apiserver_request_total` on `/metrics`), by verb and resource: what a
//! benchmark quotes as the API's cost of what happened between two reads.

use std::collections::BTreeMap;

use super::{Identity, KubeApi};

/// Requests served, by `"VERB resource[/subresource]"` (`"GET nodes"`,
/// `"PATCH nodes/status"`, `"WATCH pods"`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestCounts(pub BTreeMap<String, f64>);

impl KubeApi {
    /// The API server's request counters now. Each read is itself one
    /// `GET` request with no resource (key `"GET "`).
    pub async fn request_counts(&self) -> RequestCounts {
        let answer = self.request(Identity::Admin, "GET", "/metrics", None).await;
        let text = answer.body.as_str().unwrap_or_default();
        let mut counts = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
        {
            let Some((labels, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let label = |key: &str| {
                labels
                    .split(&format!("{key}=\""))
                    .nth(1)
                    .and_then(|rest| rest.split('"').next())
                    .unwrap_or_default()
                    .to_string()
            };
            let key = match label("subresource").as_str() {
                "" => format!("{} {}", label("verb"), label("resource")),
                sub => format!("{} {}/{sub}", label("verb"), label("resource")),
            };
            *counts.entry(key).or_default() += value.parse::<f64>().unwrap_or(0.0);
        }
        RequestCounts(counts)
    }
}

impl RequestCounts {
    /// What was served after `before` up to these counts, leaving out
    /// `ignore` (requests of the benchmark's own, by key and count).
    pub fn since(&self, before: &RequestCounts, ignore: &[(&str, f64)]) -> RequestCounts {
        let mut delta = BTreeMap::new();
        for (key, now) in &self.0 {
            let mut served = now - before.0.get(key).copied().unwrap_or(0.0);
            served -= ignore
                .iter()
                .filter(|(ignored, _)| ignored == key)
                .map(|(_, count)| count)
                .sum::<f64>();
            if served > 0.5 {
                delta.insert(key.clone(), served);
            }
        }
        RequestCounts(delta)
    }

    /// The requests of every key together.
    pub fn total(&self) -> f64 {
        self.0.values().sum()
    }

    /// The requests whose verb is not in `verbs`.
    pub fn without_verbs(&self, verbs: &[&str]) -> RequestCounts {
        let kept = self
            .0
            .iter()
            .filter(|(key, _)| !verbs.iter().any(|v| key.split(' ').next() == Some(*v)))
            .map(|(key, count)| (key.clone(), *count))
            .collect();
        RequestCounts(kept)
    }

    /// The requests on `resources` (their subresources included).
    pub fn only_resources(&self, resources: &[&str]) -> RequestCounts {
        let kept = self
            .0
            .iter()
            .filter(|(key, _)| {
                let resource = key.split(' ').nth(1).unwrap_or_default();
                let resource = resource.split('/').next().unwrap_or_default();
                resources.contains(&resource)
            })
            .map(|(key, count)| (key.clone(), *count))
            .collect();
        RequestCounts(kept)
    }

    /// Every count times `factor` (a rate over a window, or back).
    pub fn scaled(&self, factor: f64) -> RequestCounts {
        RequestCounts(
            self.0
                .iter()
                .map(|(k, n)| (k.clone(), n * factor))
                .collect(),
        )
    }

    /// The counts as (key, count) pairs, to leave out of
    /// [`since`](Self::since).
    pub fn entries(&self) -> Vec<(String, f64)> {
        self.0.iter().map(|(k, n)| (k.clone(), *n)).collect()
    }

    /// The counts divided by `per`: `"2.00 (GET resourceclaims 1.00, ...)"`.
    pub fn per(&self, per: f64) -> String {
        let lines: Vec<String> = self
            .0
            .iter()
            .map(|(key, count)| format!("{key} {:.2}", count / per))
            .collect();
        // Never "-0.00": a total of nothing is 0.
        let total = (self.total() / per).max(0.0);
        format!("{total:.2} ({})", lines.join(", "))
    }
}
