//! Kubernetes quantities compared by value: the API server writes them in
//! its canonical form (`1024Mi` comes back as `1Gi`), so a slice is
//! compared with what the driver asked for by what each quantity is worth.

/// A text for `quantity` that is the same for every way of writing its
/// value (in nano-units), or `None` if it is not a quantity or too large
/// to tell.
pub(super) fn canonical(quantity: &str) -> Option<String> {
    nano_units(quantity).map(|n| format!("{n}n"))
}

/// `quantity`'s value in billionths, if it is exactly that many.
fn nano_units(quantity: &str) -> Option<i128> {
    let (sign, rest) = match quantity.as_bytes().first()? {
        b'-' => (-1, &quantity[1..]),
        b'+' => (1, &quantity[1..]),
        _ => (1, quantity),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    if number.is_empty() || number == "." {
        return None;
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') {
        return None;
    }
    let digits = format!("{whole}{fraction}");
    let mut mantissa: i128 = digits.parse().ok()?;
    let mut exponent10 = -(fraction.len() as i32);
    let mut exponent2 = 0u32;
    match suffix {
        "" => {}
        "Ki" => exponent2 = 10,
        "Mi" => exponent2 = 20,
        "Gi" => exponent2 = 30,
        "Ti" => exponent2 = 40,
        "Pi" => exponent2 = 50,
        "Ei" => exponent2 = 60,
        "n" => exponent10 -= 9,
        "u" => exponent10 -= 6,
        "m" => exponent10 -= 3,
        "k" => exponent10 += 3,
        "M" => exponent10 += 6,
        "G" => exponent10 += 9,
        "T" => exponent10 += 12,
        "P" => exponent10 += 15,
        "E" => exponent10 += 18,
        exponent => {
            let digits = exponent
                .strip_prefix('e')
                .or_else(|| exponent.strip_prefix('E'))?;
            exponent10 += digits.parse::<i32>().ok()?;
        }
    }
    mantissa = mantissa.checked_mul(1i128.checked_shl(exponent2)?)?;
    let scale = exponent10 + 9;
    if scale >= 0 {
        mantissa = mantissa.checked_mul(10i128.checked_pow(scale.unsigned_abs())?)?;
    } else {
        let divisor = 10i128.checked_pow(scale.unsigned_abs())?;
        if mantissa % divisor != 0 {
            return None;
        }
        mantissa /= divisor;
    }
    Some(sign * mantissa)
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
