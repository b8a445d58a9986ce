//! Opaque, versioned, tamper-evident pagination cursors.
//!
//! A cursor is `v1.<payload>.<mac>`: the payload is base64url JSON holding the
//! keyset tuple of the last row served and a digest of the list's filters;
//! the MAC is HMAC-SHA256 over the payload with the server's cursor secret,
//! cut to 16 bytes. A cursor only works with the filters it was issued for:
//! anything else, or anything that does not verify, is refused.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// Longest cursor accepted (spec: 512 characters).
pub const MAX_LEN: usize = 512;
const VERSION: &str = "v1";
const MAC_LEN: usize = 16;

/// Why a presented cursor is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("is longer than 512 characters")]
    TooLong,
    #[error("is not a cursor this API issued")]
    Malformed,
    #[error("was issued for a different list or different filters")]
    OtherList,
}

#[derive(Serialize, Deserialize)]
struct Payload {
    /// Digest of the list and its filters.
    s: String,
    /// The keyset tuple of the last row served.
    k: Vec<Value>,
}

/// Signs and verifies cursors.
#[derive(Clone)]
pub struct CursorCodec {
    secret: Vec<u8>,
}

impl CursorCodec {
    pub fn new(secret: &[u8]) -> Self {
        Self {
            secret: secret.to_vec(),
        }
    }

    /// A cursor after the row whose keyset is `key`, in the list `scope`.
    pub fn encode(&self, scope: &str, key: Vec<Value>) -> String {
        let payload = Payload {
            s: scope_digest(scope),
            k: key,
        };
        // Serializing a struct of strings and JSON values cannot fail.
        let json = serde_json::to_vec(&payload).unwrap_or_default();
        let body = URL_SAFE_NO_PAD.encode(json);
        let mac = URL_SAFE_NO_PAD.encode(&self.mac(body.as_bytes())[..MAC_LEN]);
        format!("{VERSION}.{body}.{mac}")
    }

    /// The keyset tuple of a cursor issued for `scope`.
    pub fn decode(&self, scope: &str, cursor: &str) -> Result<Vec<Value>, CursorError> {
        if cursor.len() > MAX_LEN {
            return Err(CursorError::TooLong);
        }
        let mut parts = cursor.split('.');
        let (Some(VERSION), Some(body), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(CursorError::Malformed);
        };
        let presented = URL_SAFE_NO_PAD
            .decode(mac)
            .map_err(|_| CursorError::Malformed)?;
        if presented.len() != MAC_LEN {
            return Err(CursorError::Malformed);
        }
        let mut verifier =
            HmacSha256::new_from_slice(&self.secret).map_err(|_| CursorError::Malformed)?;
        verifier.update(body.as_bytes());
        verifier
            .verify_truncated_left(&presented)
            .map_err(|_| CursorError::Malformed)?;
        let json = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| CursorError::Malformed)?;
        let payload: Payload = serde_json::from_slice(&json).map_err(|_| CursorError::Malformed)?;
        if payload.s != scope_digest(scope) {
            return Err(CursorError::OtherList);
        }
        Ok(payload.k)
    }

    fn mac(&self, data: &[u8]) -> Vec<u8> {
        // HMAC takes a key of any length, so this cannot fail; an empty MAC
        // would only make every cursor refuse to verify.
        match HmacSha256::new_from_slice(&self.secret) {
            Ok(mut mac) => {
                mac.update(data);
                mac.finalize().into_bytes().to_vec()
            }
            Err(_) => Vec::new(),
        }
    }
}

fn scope_digest(scope: &str) -> String {
    hex::encode(&Sha256::digest(scope.as_bytes())[..8])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn codec() -> CursorCodec {
        CursorCodec::new(b"test-secret-0123456789")
    }

    #[test]
    fn a_cursor_round_trips_within_its_scope() {
        let key = vec![json!("FR"), json!(1024), json!(7), json!("pl_fr_1gb_7d")];
        let cursor = codec().encode("plans?country=fr", key.clone());
        assert!(cursor.starts_with("v1.") && cursor.len() <= MAX_LEN);
        assert_eq!(codec().decode("plans?country=fr", &cursor), Ok(key));
    }

    #[test]
    fn other_scopes_tampering_and_other_secrets_are_refused() {
        let cursor = codec().encode("plans", vec![json!(1)]);
        assert_eq!(
            codec().decode("plans?type=daily", &cursor),
            Err(CursorError::OtherList)
        );
        let mut tampered = cursor.clone();
        tampered.insert(5, 'A');
        assert_eq!(
            codec().decode("plans", &tampered),
            Err(CursorError::Malformed)
        );
        let other = CursorCodec::new(b"another-secret-0123456789");
        assert_eq!(other.decode("plans", &cursor), Err(CursorError::Malformed));
        for junk in [
            "",
            "v1",
            "v1..",
            "v2.a.b",
            "v1.a.b.c",
            "not a cursor",
            "v1.!!!.???",
        ] {
            assert!(codec().decode("plans", junk).is_err(), "{junk}");
        }
        assert_eq!(
            codec().decode("plans", &"a".repeat(513)),
            Err(CursorError::TooLong)
        );
    }
}
