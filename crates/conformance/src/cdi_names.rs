//! Fully qualified CDI device names (`vendor.example.com/class=name`), the
//! form a container runtime resolves. The kubelet passes the names a
//! device plugin or DRA driver gives it to the runtime unchecked; the
//! runtime refuses a container whose CDI device it cannot resolve.
//!
//! The grammar is the CDI specification's: the vendor starts with a
//! letter, ends with a letter or digit, and holds letters, digits, `-`,
//! `_` and `.`; the class starts with a letter, ends with a letter or
//! digit, and holds letters, digits, `-` and `_`; the name starts and ends
//! with a letter or digit and holds letters, digits, `-`, `_`, `.` and `:`.

/// Why `name` is not a fully qualified CDI device name, if it is not.
pub(crate) fn problem(name: &str) -> Option<String> {
    let Some((kind, device)) = name.split_once('=') else {
        return Some(format!("{name:?} has no '=' (vendor/class=name)"));
    };
    let Some((vendor, class)) = kind.split_once('/') else {
        return Some(format!("{name:?} has no vendor/class before '='"));
    };
    let part = |what: &str, text: &str, first_letter: bool, extra: &[char]| {
        let ok = !text.is_empty()
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
            && text.starts_with(|c: char| {
                if first_letter {
                    c.is_ascii_alphabetic()
                } else {
                    c.is_ascii_alphanumeric()
                }
            })
            && text.ends_with(|c: char| c.is_ascii_alphanumeric());
        (!ok).then(|| format!("{name:?}: {what} {text:?} is not valid"))
    };
    part("vendor", vendor, true, &['-', '_', '.'])
        .or_else(|| part("class", class, true, &['-', '_']))
        .or_else(|| part("device name", device, false, &['-', '_', '.', ':']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_follow_the_cdi_grammar() {
        assert_eq!(problem("nvidia.com/gpu=0"), None);
        assert_eq!(problem("example.com/resource=CDI-Dev-1"), None);
        assert_eq!(problem("vendor.example.com/gpu=mig:1.2"), None);
        assert!(problem("gpu0").is_some());
        assert!(problem("example.com=gpu0").is_some());
        assert!(problem("example.com/gpu=").is_some());
        assert!(problem("1example.com/gpu=a").is_some());
        assert!(problem("example.com/gpu.x=a").is_some());
        assert!(problem("example.com/gpu=-a").is_some());
    }
}
