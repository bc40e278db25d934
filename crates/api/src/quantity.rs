//! Kubernetes quantities (`100m`, `1.5Gi`, `2e3`) read exactly: as the
//! kubelet's `Quantity.Value()` and `MilliValue()` read them (the value
//! rounded up to a whole unit or a whole thousandth), or as an exact count
//! of billionths, to compare two ways of writing one value.

/// `text`'s value in whole units, rounded up (`1500m` is 2); `None` for
/// text that is not a quantity or too large.
pub fn value(text: &str) -> Option<i64> {
    scaled_up(text, 0)
}

/// `text`'s value in thousandths, rounded up (`0.1` is 100, `1u` is 1);
/// `None` for text that is not a quantity or too large.
pub fn milli_value(text: &str) -> Option<i64> {
    scaled_up(text, 3)
}

/// `text`'s value in billionths (`1Gi` is 1073741824000000000n, `100m`
/// is 100000000n), if it is a whole number of them; `None` for text that
/// is not a quantity, a finer one, or one too large.
pub fn nano_units(text: &str) -> Option<i128> {
    let (mantissa, exponent10) = exact(text.trim())?;
    let scale = exponent10.checked_add(9)?;
    if scale >= 0 {
        mantissa.checked_mul(10i128.checked_pow(scale.unsigned_abs())?)
    } else {
        let divisor = 10i128.checked_pow(scale.unsigned_abs())?;
        (mantissa % divisor == 0).then(|| mantissa / divisor)
    }
}

/// Whether `text` is written with a binary suffix (`Ki` .. `Ei`): a sum
/// keeps the way its first term is written.
pub fn is_binary(text: &str) -> bool {
    let text = text.trim();
    ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
        .iter()
        .any(|suffix| text.ends_with(suffix))
}

/// A value of `nano` billionths as the API writes it (`Quantity.String()`
/// in canonical form): with a binary suffix when `binary` and the value is
/// a whole number of at least 1024 (`1536Mi`, `1Gi`), else with the
/// largest decimal suffix that keeps the number whole (`100m`, `1500`,
/// `2k`).
pub fn canonical(nano: i128, binary: bool) -> String {
    const GIGA: i128 = 1_000_000_000;
    if nano == 0 {
        return "0".into();
    }
    let (sign, magnitude) = if nano < 0 { ("-", -nano) } else { ("", nano) };
    if binary && magnitude % GIGA == 0 && magnitude / GIGA >= 1024 {
        let mut units = magnitude / GIGA;
        let mut suffix = 0;
        while suffix < 6 && units % 1024 == 0 {
            units /= 1024;
            suffix += 1;
        }
        let suffixes = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
        return format!("{sign}{units}{}", suffixes[suffix]);
    }
    // Exponents of ten, in thousands, from n (10^-9) to E (10^18).
    let suffixes = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
    let mut mantissa = magnitude;
    let mut step = 0;
    while step < suffixes.len() - 1 && mantissa % 1000 == 0 {
        mantissa /= 1000;
        step += 1;
    }
    format!("{sign}{mantissa}{}", suffixes[step])
}

/// `text`'s value times 10^`digits`, rounded up.
fn scaled_up(text: &str, digits: u32) -> Option<i64> {
    let (mantissa, exponent10) = exact(text.trim())?;
    let exponent10 = exponent10 + i32::try_from(digits).ok()?;
    let value = if exponent10 >= 0 {
        mantissa.checked_mul(10i128.checked_pow(exponent10.unsigned_abs())?)?
    } else {
        let divisor = 10i128.checked_pow(exponent10.unsigned_abs())?;
        // Rounded up, as the kubelet's quantities round.
        let quotient = mantissa.div_euclid(divisor);
        if mantissa.rem_euclid(divisor) == 0 {
            quotient
        } else {
            quotient + 1
        }
    };
    i64::try_from(value).ok()
}

/// `text` as `mantissa × 10^exponent`, exactly (binary suffixes folded
/// into the mantissa).
fn exact(text: &str) -> Option<(i128, i32)> {
    let (sign, rest) = match text.as_bytes().first()? {
        b'-' => (-1, &text[1..]),
        b'+' => (1, &text[1..]),
        _ => (1, text),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let mut mantissa: i128 = format!("{whole}{fraction}").parse().ok()?;
    let mut exponent10 = -i32::try_from(fraction.len()).ok()?;
    let binary = |power: u32| 1i128.checked_shl(power);
    match suffix {
        "" => {}
        "Ki" => mantissa = mantissa.checked_mul(binary(10)?)?,
        "Mi" => mantissa = mantissa.checked_mul(binary(20)?)?,
        "Gi" => mantissa = mantissa.checked_mul(binary(30)?)?,
        "Ti" => mantissa = mantissa.checked_mul(binary(40)?)?,
        "Pi" => mantissa = mantissa.checked_mul(binary(50)?)?,
        "Ei" => mantissa = mantissa.checked_mul(binary(60)?)?,
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
            let digits = exponent.strip_prefix(['e', 'E'])?;
            exponent10 = exponent10.checked_add(digits.parse::<i32>().ok()?)?;
        }
    }
    Some((sign * mantissa, exponent10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_up_to_whole_units() {
        for (text, want) in [
            ("2", Some(2)),
            ("1500m", Some(2)),
            ("1Ki", Some(1024)),
            ("1.5Gi", Some(1_610_612_736)),
            ("2e3", Some(2000)),
            ("0.5", Some(1)),
            ("-1", Some(-1)),
            ("x", None),
            (".", None),
            ("1..2", None),
        ] {
            assert_eq!(value(text), want, "{text}");
        }
    }

    #[test]
    fn sums_are_written_as_the_api_writes_quantities() {
        let sum = |a: &str, b: &str| {
            canonical(
                nano_units(a).unwrap() + nano_units(b).unwrap(),
                is_binary(a),
            )
        };
        assert_eq!(sum("64Mi", "0"), "64Mi");
        assert_eq!(sum("1Gi", "512Mi"), "1536Mi");
        assert_eq!(sum("100m", "200m"), "300m");
        assert_eq!(sum("1", "500m"), "1500m");
        assert_eq!(sum("1", "1"), "2");
        assert_eq!(sum("500", "500"), "1k");
        assert_eq!(sum("512", "256"), "768");
        assert_eq!(sum("1Ki", "1"), "1025");
        assert_eq!(canonical(0, true), "0");
    }

    #[test]
    fn nano_units_are_exact_or_none() {
        assert_eq!(nano_units("100m"), Some(100_000_000));
        assert_eq!(nano_units("1Ki"), Some(1_024_000_000_000));
        assert_eq!(nano_units("-2"), Some(-2_000_000_000));
        assert_eq!(nano_units("1.0000000001"), None, "finer than a billionth");
        assert_eq!(nano_units("Gi"), None);
    }

    #[test]
    fn milli_values_are_exact_where_floating_point_is_not() {
        for (text, want) in [
            ("0.1", Some(100)),
            ("100m", Some(100)),
            ("1", Some(1000)),
            ("1u", Some(1)),
            ("250m", Some(250)),
            ("1.001", Some(1001)),
            ("0", Some(0)),
        ] {
            assert_eq!(milli_value(text), want, "{text}");
        }
    }
}
