//! Resource ids: a kind prefix plus a time-ordered random part.
//!
//! The random part is a UUIDv7 written in base62 with a fixed width of 22
//! characters, so ids sort by creation time both as strings and as UUIDs.

use std::fmt;

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// Digits needed for any `u128` in base 62 (62^22 > 2^128).
const WIDTH: usize = 22;

/// Base-62 digits in one `u64` chunk (62^10 < 2^64).
const CHUNK_DIGITS: usize = 10;
/// 62^[`CHUNK_DIGITS`].
const CHUNK: u128 = 62u128.pow(CHUNK_DIGITS as u32);

/// Encodes `value` in base62, left-padded with `0` to [`WIDTH`] characters.
///
/// Every id an order makes passes through here, so the 128-bit value is cut
/// into base-62^10 chunks with two 128-bit divisions and each chunk is
/// written with 64-bit ones, instead of 22 128-bit divisions (a software
/// routine on x86-64).
pub fn base62_fixed(value: u128) -> String {
    let mut text = String::with_capacity(WIDTH);
    push_base62(&mut text, value);
    text
}

/// Appends [`base62_fixed`]'s digits of `value` to `text`.
fn push_base62(text: &mut String, value: u128) {
    let mut digits = [b'0'; WIDTH];
    // Two digits, then ten, then the last ten.
    let (upper, last) = digits.split_at_mut(WIDTH - CHUNK_DIGITS);
    let (high, middle) = upper.split_at_mut(WIDTH - 2 * CHUNK_DIGITS);
    // Each remainder is below CHUNK < 2^64, and the last quotient below
    // 2^128 / 62^20 < 62^2, so every cast keeps its value.
    let rest = value / CHUNK;
    write_chunk(last, (value % CHUNK) as u64);
    write_chunk(middle, (rest % CHUNK) as u64);
    write_chunk(high, (rest / CHUNK) as u64);
    // Every byte comes from the BASE62 alphabet, which is ASCII, so the
    // digits are UTF-8 and the empty fallback is never taken. In one copy,
    // not pushed char by char.
    text.push_str(std::str::from_utf8(&digits).unwrap_or_default());
}

/// Writes `value` in base62 into `slots`, most significant digit first
/// (leading slots keep their `0` once `value` runs out).
fn write_chunk(slots: &mut [u8], mut value: u64) {
    for slot in slots.iter_mut().rev() {
        *slot = BASE62[(value % 62) as usize];
        value /= 62;
    }
}

/// A fresh time-ordered suffix for an id.
pub fn new_suffix() -> String {
    base62_fixed(uuid::Uuid::now_v7().as_u128())
}

/// `prefix` and a fresh suffix in one allocation: several ids are made for
/// every order, and `format!` cost more than the suffix itself.
fn with_new_suffix(prefix: &str) -> String {
    let mut id = String::with_capacity(prefix.len() + WIDTH);
    id.push_str(prefix);
    push_base62(&mut id, uuid::Uuid::now_v7().as_u128());
    id
}

/// Why a string is not an id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must begin with `{0}`")]
    WrongKind(&'static str),
    #[error("is not a well-formed id")]
    Malformed,
}

/// Checks the prefix and the character set of an id; the length is bounded so
/// that a caller cannot make us store or log an arbitrarily long string.
pub fn check_id(value: &str, prefix: &'static str) -> Result<(), IdError> {
    let Some(rest) = value.strip_prefix(prefix) else {
        return Err(IdError::WrongKind(prefix));
    };
    let well_formed = !rest.is_empty()
        && rest.len() <= 64
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if well_formed {
        Ok(())
    } else {
        Err(IdError::Malformed)
    }
}

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The kind prefix, e.g. `pt_`.
            pub const PREFIX: &'static str = $prefix;

            /// Mints a new time-ordered id.
            pub fn generate() -> Self {
                Self(with_new_suffix($prefix))
            }

            /// Accepts a caller-supplied id after checking its kind and shape.
            pub fn parse(value: &str) -> Result<Self, IdError> {
                check_id(value, $prefix).map(|()| Self(value.to_owned()))
            }

            /// Wraps an id read back from our own storage.
            pub fn from_trusted(value: String) -> Self {
                Self(value)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

prefixed_id!(
    /// A partner (reseller account).
    PartnerId, "pt_"
);
prefixed_id!(
    /// An API key (not the secret).
    KeyId, "pk_"
);

prefixed_id!(
    /// An order.
    OrderId, "po_"
);
prefixed_id!(
    /// A ledger entry.
    LedgerEntryId, "led_"
);
prefixed_id!(
    /// A deposit.
    DepositId, "dep_"
);
prefixed_id!(
    /// A named operator.
    OperatorId, "op_"
);
prefixed_id!(
    /// A money movement held for a second operator.
    ApprovalId, "apr_"
);

/// A request id, echoed in `X-Request-Id` and `error.request_id`.
pub fn new_request_id() -> String {
    with_new_suffix("req_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base62_is_fixed_width_and_order_preserving() {
        assert_eq!(base62_fixed(0), "0".repeat(22));
        assert_eq!(base62_fixed(u128::MAX).len(), 22);
        let (a, b) = (base62_fixed(61), base62_fixed(62));
        assert_eq!(&a[20..], "0z");
        assert_eq!(&b[20..], "10");
        assert!(a < b);
        assert_eq!(base62_fixed(u128::MAX), "7n42DGM5Tflk9n8mt7Fhc7");
        assert_eq!(base62_fixed(62u128.pow(20)), "0100000000000000000000");
        assert_eq!(base62_fixed(62u128.pow(10) - 1), "000000000000zzzzzzzzzz");
    }

    /// Digit by digit in 128 bits: what the chunked encoding must equal.
    fn base62_by_digit(mut value: u128) -> String {
        let mut digits = [b'0'; WIDTH];
        for slot in digits.iter_mut().rev() {
            *slot = BASE62[(value % 62) as usize];
            value /= 62;
        }
        digits.iter().map(|&b| b as char).collect()
    }

    proptest::proptest! {
        #[test]
        fn chunked_base62_equals_digit_by_digit_and_keeps_order(a: u128, b: u128) {
            proptest::prop_assert_eq!(base62_fixed(a), base62_by_digit(a));
            proptest::prop_assert_eq!(a.cmp(&b), base62_fixed(a).cmp(&base62_fixed(b)));
        }
    }

    #[test]
    fn a_new_id_is_its_prefix_and_a_fixed_width_suffix() {
        let id = with_new_suffix("ord_");
        let suffix = id.strip_prefix("ord_").unwrap();
        assert_eq!(suffix.len(), WIDTH);
        assert!(suffix.bytes().all(|b| BASE62.contains(&b)));
        assert!(new_request_id().starts_with("req_"));
        assert_eq!(new_request_id().len(), 4 + WIDTH);
    }

    #[test]
    fn generated_ids_sort_by_creation() {
        let first = PartnerId::generate();
        let second = PartnerId::generate();
        assert!(first < second, "{first} !< {second}");
        assert!(first.as_str().starts_with("pt_"));
        assert_eq!(first.as_str().len(), 3 + 22);
    }

    #[test]
    fn parse_checks_kind_then_shape() {
        assert!(PartnerId::parse("pt_abc").is_ok());
        assert_eq!(PartnerId::parse("pk_abc"), Err(IdError::WrongKind("pt_")));
        assert_eq!(PartnerId::parse("pt_"), Err(IdError::Malformed));
        assert_eq!(PartnerId::parse("pt_a b"), Err(IdError::Malformed));
        assert_eq!(
            PartnerId::parse(&format!("pt_{}", "a".repeat(65))),
            Err(IdError::Malformed)
        );
    }
}
