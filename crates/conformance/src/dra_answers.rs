//! Checks of a DRA driver's answers: every claim answered by UID, a
//! failing claim failed alone, the same devices again.

use super::claims::TestClaim;
use super::dra_client::{Prepared, identities};
use super::rule::Verdict;

pub(crate) fn by_uid(claims: &[TestClaim], answer: &Prepared) -> Verdict {
    let missing: Vec<&str> = claims
        .iter()
        .filter(|c| !answer.contains_key(&c.uid))
        .map(|c| c.uid.as_str())
        .collect();
    let extra: Vec<&String> = answer
        .keys()
        .filter(|uid| claims.iter().all(|c| &c.uid != *uid))
        .collect();
    if !missing.is_empty() {
        Verdict::Fail(format!("no answer for claims {missing:?}"))
    } else if !extra.is_empty() {
        Verdict::Fail(format!("answers for claims not asked for: {extra:?}"))
    } else {
        Verdict::Pass(format!("{} claims answered by UID", claims.len()))
    }
}

pub(crate) fn per_claim_errors(claims: &[TestClaim], answer: Result<Prepared, String>) -> Verdict {
    let Some(failing) = claims.iter().find(|c| c.fails) else {
        return Verdict::Skip("no claim expected to fail".into());
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => {
            return Verdict::Warn(format!(
                "the whole call failed for a batch with {}/{}: {e} (the kubelet fails the pod's prepare either way, and retries)",
                failing.namespace, failing.name
            ));
        }
    };
    let failed_right = matches!(answer.get(&failing.uid), Some(Err(_)));
    let others: Vec<&str> = claims
        .iter()
        .filter(|c| !c.fails && !matches!(answer.get(&c.uid), Some(Ok(_))))
        .map(|c| c.uid.as_str())
        .collect();
    if !failed_right {
        Verdict::Fail(format!(
            "claim {}/{} was expected to fail, and has no error",
            failing.namespace, failing.name
        ))
    } else if !others.is_empty() {
        Verdict::Warn(format!(
            "the other claims failed too: {others:?} (the kubelet fails the pod's prepare either way)"
        ))
    } else {
        Verdict::Pass(format!(
            "{}/{} failed alone",
            failing.namespace, failing.name
        ))
    }
}

pub(crate) fn same_devices(claims: &[TestClaim], first: &Prepared, again: &Prepared) -> Verdict {
    for claim in claims {
        let (Some(Ok(before)), Some(Ok(after))) = (first.get(&claim.uid), again.get(&claim.uid))
        else {
            return Verdict::Fail(format!(
                "claim {}/{} was not prepared both times",
                claim.namespace, claim.name
            ));
        };
        if identities(before) != identities(after) {
            return Verdict::Fail(format!(
                "claim {}/{}: {:?} the first time, {:?} the second",
                claim.namespace,
                claim.name,
                identities(before),
                identities(after)
            ));
        }
    }
    Verdict::Pass(format!("{} claims: the same devices again", claims.len()))
}

/// Whether an unprepare answer names every claim of the batch and no
/// other: the DRA manager counts the claims answered, fails the call with
/// "NodeUnprepareResources skipped N ResourceClaims" when some are left
/// out, and retries, keeping the claims from every other pod meanwhile.
pub(crate) fn unprepared_by_uid(claims: &[TestClaim], answered: &[String]) -> Verdict {
    let missing: Vec<&str> = claims
        .iter()
        .filter(|c| !answered.contains(&c.uid))
        .map(|c| c.uid.as_str())
        .collect();
    let extra: Vec<&String> = answered
        .iter()
        .filter(|uid| claims.iter().all(|c| &c.uid != *uid))
        .collect();
    if !missing.is_empty() {
        Verdict::Fail(format!(
            "no answer for claims {missing:?}: the kubelet retries the unprepare and holds the claims"
        ))
    } else if !extra.is_empty() {
        Verdict::Fail(format!("answers for claims not asked for: {extra:?}"))
    } else {
        Verdict::Pass(format!("{} claims answered by UID", claims.len()))
    }
}

/// Whether every device of every prepared claim names its CDI devices by
/// fully qualified name: the DRA manager passes them to the container
/// runtime unchecked (claiminfo.go), and the runtime refuses a container
/// whose CDI device it cannot resolve.
pub(crate) fn cdi_ids(answer: &Prepared, cdi_dirs: &[std::path::PathBuf]) -> Verdict {
    // Read once the answer is in: a driver writes its specs before it
    // answers.
    let specs = (!cdi_dirs.is_empty()).then(|| super::cdi_specs::CdiSpecs::load(cdi_dirs));
    let mut count = 0;
    for (uid, devices) in answer {
        let Ok(devices) = devices else { continue };
        for device in devices {
            for id in &device.cdi_device_ids {
                count += 1;
                if let Some(problem) = super::cdi_names::problem(id) {
                    return Verdict::Fail(format!(
                        "claim {uid}, device {}: {problem}; the kubelet passes it to the container runtime, which refuses the container",
                        device.device_name
                    ));
                }
                if let Some(specs) = &specs
                    && !specs.resolves(id)
                {
                    return Verdict::Fail(format!(
                        "claim {uid}, device {}: {id:?} is named by no CDI spec in {cdi_dirs:?}; the container runtime cannot resolve it and refuses the container",
                        device.device_name
                    ));
                }
            }
        }
    }
    match specs {
        Some(_) => Verdict::Pass(format!(
            "{count} CDI device ids, all fully qualified and each named by a spec in {cdi_dirs:?}"
        )),
        None => Verdict::Pass(format!(
            "{count} CDI device ids, all fully qualified (not resolved: no --cdi-dir)"
        )),
    }
}
