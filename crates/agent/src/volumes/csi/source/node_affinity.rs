//! Whether a PersistentVolume may be used on this node: its
//! `nodeAffinity.required` terms against the node's labels, as the
//! kubelet checks before it mounts (`CheckNodeAffinity`). The terms are
//! or-ed, a term's requirements and-ed, and a term with none matches
//! nothing. The kubelet checks labels only, with a Node that has no name,
//! so a `matchFields` requirement on `metadata.name` never matches there;
//! this matches it the same.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume};

/// Why the volume may not be used here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AffinityError {
    /// No term selects the node.
    #[error("no matching NodeSelectorTerms")]
    NoMatch,
    /// A requirement cannot be read.
    #[error("{0}")]
    Invalid(String),
}

/// Whether `pv` may be used on a node with `labels`.
pub(crate) fn check(
    pv: &PersistentVolume,
    labels: &BTreeMap<String, String>,
) -> Result<(), AffinityError> {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return Ok(());
    };
    for term in &required.node_selector_terms {
        if term_matches(term, labels)? {
            return Ok(());
        }
    }
    Err(AffinityError::NoMatch)
}

fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
) -> Result<bool, AffinityError> {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return Ok(false);
    }
    for requirement in expressions {
        if !requirement_matches(
            requirement,
            labels.get(&requirement.key).map(String::as_str),
        )? {
            return Ok(false);
        }
    }
    for requirement in fields {
        if requirement.key != "metadata.name" {
            return Err(AffinityError::Invalid(format!(
                "not a valid field selector key: {:?}",
                requirement.key
            )));
        }
        // The kubelet's Node here has no name.
        if !requirement_matches(requirement, Some(""))? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn requirement_matches(
    requirement: &NodeSelectorRequirement,
    value: Option<&str>,
) -> Result<bool, AffinityError> {
    let values = requirement.values.as_deref().unwrap_or_default();
    let number = |text: &str| {
        text.parse::<i64>().map_err(|_| {
            AffinityError::Invalid(format!(
                "for 'Gt', 'Lt' operators, the value must be an integer: {text:?}"
            ))
        })
    };
    Ok(match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|w| w == v)),
        "NotIn" => !value.is_some_and(|v| values.iter().any(|w| w == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let [bound] = values else {
                return Err(AffinityError::Invalid(format!(
                    "for 'Gt', 'Lt' operators, exactly one value is required, {} given",
                    values.len()
                )));
            };
            let bound = number(bound)?;
            match value {
                None => false,
                Some(v) => {
                    let v = number(v)?;
                    if requirement.operator == "Gt" {
                        v > bound
                    } else {
                        v < bound
                    }
                }
            }
        }
        other => {
            return Err(AffinityError::Invalid(format!(
                "{other:?} is not a valid label selector operator"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pv(terms: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pv"},
            "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": terms}}},
        }))
        .unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn terms_are_or_ed_and_requirements_and_ed() {
        let zone = labels(&[("zone", "a"), ("gen", "5")]);
        let volume = pv(serde_json::json!([
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
            {"matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["a"]},
                {"key": "gen", "operator": "Gt", "values": ["4"]},
                {"key": "gpu", "operator": "DoesNotExist"},
            ]},
        ]));
        assert_eq!(check(&volume, &zone), Ok(()));
        let old = labels(&[("zone", "a"), ("gen", "3")]);
        assert_eq!(check(&volume, &old), Err(AffinityError::NoMatch));
        assert_eq!(check(&volume, &labels(&[])), Err(AffinityError::NoMatch));
    }

    #[test]
    fn a_volume_without_affinity_goes_anywhere_and_an_empty_term_nowhere() {
        let anywhere: PersistentVolume =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "pv"}, "spec": {}}))
                .unwrap();
        assert_eq!(check(&anywhere, &labels(&[])), Ok(()));
        assert_eq!(
            check(&pv(serde_json::json!([{}])), &labels(&[("a", "b")])),
            Err(AffinityError::NoMatch)
        );
    }

    #[test]
    fn a_node_name_field_never_matches_as_on_the_kubelet() {
        let named = pv(serde_json::json!([
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]},
        ]));
        assert_eq!(check(&named, &labels(&[])), Err(AffinityError::NoMatch));
    }

    #[test]
    fn a_bad_requirement_is_named() {
        let bad = pv(serde_json::json!([
            {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["x"]}]},
        ]));
        assert!(matches!(
            check(&bad, &labels(&[("gen", "1")])),
            Err(AffinityError::Invalid(_))
        ));
    }
}
