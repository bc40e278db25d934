//! Kubernetes quantities compared by value: the API server writes them in
//! its canonical form (`1024Mi` comes back as `1Gi`), so a slice is
//! compared with what the driver asked for by what each quantity is worth.

/// A text for `quantity` that is the same for every way of writing its
/// value (in nano-units), or `None` if it is not a quantity or too large
/// to tell.
pub(super) fn canonical(quantity: &str) -> Option<String> {
    nodeplugins_api::quantity::nano_units(quantity).map(|n| format!("{n}n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_value_written_differently_is_the_same() {
        let same = |a: &str, b: &str| canonical(a).is_some() && canonical(a) == canonical(b);
        assert!(same("1Gi", "1024Mi"));
        assert!(same("1Gi", "1073741824"));
        assert!(same("100m", "0.1"));
        assert!(same("1k", "1000"));
        assert!(same("1e3", "1k"));
        assert!(same("1.5", "1500m"));
        assert!(same("+2", "2"));
        assert!(!same("1Gi", "1G"));
        assert!(!same("-1", "1"));
        for not_a_quantity in ["", "abc", "1X", "1.2.3", ".", "Gi"] {
            assert_eq!(canonical(not_a_quantity), None, "{not_a_quantity:?}");
        }
    }
}
