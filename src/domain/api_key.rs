//! API key material: the spec's key forms, generation from a CSPRNG, and the
//! digest we store instead of the secret.
//!
//! Keys carry 43 random base62 characters (about 256 bits), so a single fast
//! SHA-256 is the right digest: there is nothing for a slow hash to stretch.

use rand::{Rng, distr::Alphanumeric};

use super::partner::Mode;

const LIVE_PREFIX: &str = "svc_sk_live_";
const SANDBOX_PREFIX: &str = "svc_sk_test_";
/// Random characters after the prefix.
pub const SECRET_LEN: usize = 43;

/// A newly issued secret. Shown to the operator once, never stored.
pub struct IssuedSecret {
    /// The whole key, prefix included.
    pub secret: String,
    /// What is stored: the SHA-256 of `secret` in lowercase hex.
    pub hash: String,
    /// The last four characters of `secret`.
    pub last4: String,
}

fn prefix(mode: Mode) -> &'static str {
    match mode {
        Mode::Live => LIVE_PREFIX,
        Mode::Sandbox => SANDBOX_PREFIX,
    }
}

/// Generates a key of the spec's form from the thread-local CSPRNG
/// (ChaCha, seeded from the operating system).
pub fn issue(mode: Mode) -> IssuedSecret {
    let random: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(SECRET_LEN)
        .map(char::from)
        .collect();
    let secret = format!("{}{random}", prefix(mode));
    let last4 = secret[secret.len() - 4..].to_owned();
    IssuedSecret {
        hash: digest(&secret),
        secret,
        last4,
    }
}

/// Lowercase hex SHA-256 of a presented key.
pub fn digest(secret: &str) -> String {
    super::digest::sha256_hex(secret.as_bytes())
}

/// The mode a presented key claims, if it has the spec's exact form.
/// A key that fails this check is malformed and gets `auth.invalid_key`
/// without any lookup.
pub fn parse_form(presented: &str) -> Option<Mode> {
    let (mode, rest) = if let Some(rest) = presented.strip_prefix(LIVE_PREFIX) {
        (Mode::Live, rest)
    } else {
        (Mode::Sandbox, presented.strip_prefix(SANDBOX_PREFIX)?)
    };
    (rest.len() == SECRET_LEN && rest.bytes().all(|b| b.is_ascii_alphanumeric())).then_some(mode)
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    #[test]
    fn issued_keys_have_the_spec_form() {
        for mode in [Mode::Live, Mode::Sandbox] {
            let key = issue(mode);
            assert_eq!(parse_form(&key.secret), Some(mode));
            assert_eq!(key.secret.len(), prefix(mode).len() + SECRET_LEN);
            assert_eq!(key.hash, digest(&key.secret));
            assert_eq!(key.hash.len(), 64);
            assert!(key.secret.ends_with(&key.last4));
        }
    }

    /// The digest is SHA-256 in lowercase hex, as stored keys were hashed.
    #[test]
    fn digest_is_lowercase_hex_sha256() {
        assert_eq!(
            digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let secret = issue(Mode::Sandbox).secret;
        assert_eq!(
            digest(&secret),
            hex::encode(Sha256::digest(secret.as_bytes()))
        );
    }

    #[test]
    fn two_keys_differ() {
        assert_ne!(issue(Mode::Live).secret, issue(Mode::Live).secret);
    }

    #[test]
    fn malformed_keys_are_refused() {
        let good = issue(Mode::Live).secret;
        assert_eq!(parse_form(&good[..good.len() - 1]), None);
        assert_eq!(parse_form(&format!("{good}x")), None);
        assert_eq!(
            parse_form(&good.replace("svc_sk_live_", "svc_sk_prod_")),
            None
        );
        assert_eq!(parse_form(&format!("{}!", &good[..good.len() - 1])), None);
        assert_eq!(parse_form(""), None);
    }
}
