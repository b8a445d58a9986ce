//! eSIM profile identifiers: ICCIDs (ITU-T E.118 with a Luhn check digit) and
//! GSMA SGP.22 activation codes.

/// Luhn check digit of a string of digits.
pub fn luhn_check_digit(digits: &str) -> Option<u32> {
    let mut sum = 0;
    for (i, ch) in digits.chars().rev().enumerate() {
        let mut d = ch.to_digit(10)?;
        if i % 2 == 0 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
    }
    Some((10 - sum % 10) % 10)
}

/// Whether `iccid` is 19 or 20 digits, starts `89`, and ends in a valid Luhn digit.
pub fn is_valid_iccid(iccid: &str) -> bool {
    (19..=20).contains(&iccid.len())
        && iccid.starts_with("89")
        && iccid.bytes().all(|b| b.is_ascii_digit())
        && luhn_check_digit(&iccid[..iccid.len() - 1])
            .is_some_and(|check| iccid.ends_with(char::from_digit(check, 10).unwrap_or('x')))
}

/// An ICCID from an 18-digit body (issuer and serial): `89` + 17 digits + check digit = 20.
pub fn iccid_from_serial(issuer: &str, serial: u64) -> String {
    let body = format!(
        "89{issuer}{serial:0width$}",
        width = 17usize.saturating_sub(issuer.len())
    );
    let body = &body[..19.min(body.len())];
    let check = luhn_check_digit(body).unwrap_or(0);
    format!("{body}{check}")
}

/// `LPA:1$<SM-DP+ address without scheme>$<matching id>`.
pub fn activation_code(smdp_address: &str, matching_id: &str) -> String {
    let host = smdp_address
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    format!("LPA:1${host}${matching_id}")
}

/// Splits an activation code into SM-DP+ address and matching id.
pub fn parse_activation_code(code: &str) -> Option<(&str, &str)> {
    let rest = code.strip_prefix("LPA:1$")?;
    let (smdp, matching) = rest.split_once('$')?;
    (!smdp.is_empty() && !matching.is_empty())
        .then_some((smdp, matching.split('$').next().unwrap_or(matching)))
}

/// Apple's universal link that installs a profile on iOS 17.4 and later.
pub fn apple_install_url(activation_code: &str) -> String {
    let encoded: String = form_urlencoded::byte_serialize(activation_code.as_bytes()).collect();
    format!("https://esimsetup.apple.com/esim_qrcode_provisioning?carddata={encoded}")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn known_iccids_validate() {
        // 8901260 test ranges, check digits computed by hand.
        assert_eq!(luhn_check_digit("7992739871"), Some(3));
        let iccid = iccid_from_serial("44", 123);
        assert_eq!(iccid.len(), 20);
        assert!(is_valid_iccid(&iccid), "{iccid}");
        assert!(
            !is_valid_iccid("8944000000000001230"),
            "wrong check digit or length"
        );
        assert!(!is_valid_iccid("1234567890123456789"));
        assert!(!is_valid_iccid("89abc"));
    }

    #[test]
    fn activation_codes_round_trip() {
        let code = activation_code("https://smdp.example.com", "ABC-123");
        assert_eq!(code, "LPA:1$smdp.example.com$ABC-123");
        assert_eq!(
            parse_activation_code(&code),
            Some(("smdp.example.com", "ABC-123"))
        );
        assert!(apple_install_url(&code).starts_with(
            "https://esimsetup.apple.com/esim_qrcode_provisioning?carddata=LPA%3A1%24"
        ));
    }

    proptest! {
        #[test]
        fn every_generated_iccid_is_valid(serial in 0u64..1_000_000_000_000_000) {
            prop_assert!(is_valid_iccid(&iccid_from_serial("44", serial)));
        }

        #[test]
        fn a_changed_digit_breaks_the_check(serial in 0u64..1_000_000_000_000, pos in 2usize..19, delta in 1u32..10) {
            let iccid = iccid_from_serial("44", serial);
            let mut digits: Vec<u32> = iccid.chars().map(|c| c.to_digit(10).unwrap()).collect();
            digits[pos] = (digits[pos] + delta) % 10;
            let changed: String = digits.iter().map(|d| char::from_digit(*d, 10).unwrap()).collect();
            prop_assert!(!is_valid_iccid(&changed));
        }
    }
}
