//! SHA-256 digests in lowercase hex: the form a key's secret is stored in,
//! and a request's fingerprint.

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `data`.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    // Encoded into a buffer at once: `hex::encode` pushes it char by char,
    // and `from_utf8_lossy` checks it byte by byte. 32 bytes fill the 64
    // digits exactly, so the encoding cannot fail, and hex digits are
    // UTF-8, so the empty fallback is never taken.
    let mut hex = [0u8; 64];
    let _ = hex::encode_to_slice(Sha256::digest(data), &mut hex);
    String::from_utf8(hex.to_vec()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The same text as `hex::encode` of the digest.
        #[test]
        fn as_hex_encode_writes_it(data in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            proptest::prop_assert_eq!(sha256_hex(&data), hex::encode(Sha256::digest(&data)));
        }
    }

    #[test]
    fn the_digest_of_nothing() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
