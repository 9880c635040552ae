//! URLs signed with HMAC-SHA256 that carry their own expiry, like presigned S3 URLs: the
//! signature covers the method, the path and the expiry, so none of them can be changed.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a newly generated secret.
pub const SECRET_BYTES: usize = 32;

/// Why a signed request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the URL's signature does not match")]
    BadSignature,
    #[error("the URL has expired")]
    Expired,
}

/// Signs and verifies URLs under one secret.
#[derive(Clone)]
pub struct UrlSigner {
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for UrlSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UrlSigner(..)")
    }
}

impl UrlSigner {
    /// A signer under `secret` (any length; [`SECRET_BYTES`] random bytes are generated).
    pub fn new(secret: &[u8]) -> Self {
        let mac = Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        Self { mac }
    }

    fn mac_of(&self, method: &str, path: &str, expires: i64) -> Hmac<Sha256> {
        let mut mac = self.mac.clone();
        mac.update(format!("{method}\n{path}\n{expires}").as_bytes());
        mac
    }

    /// The hex signature allowing `method` on `path` until `expires` (Unix seconds).
    pub fn signature(&self, method: &str, path: &str, expires: i64) -> String {
        hex::encode(self.mac_of(method, path, expires).finalize().into_bytes())
    }

    /// The query string `expires=…&signature=…` of a signed URL.
    pub fn query(&self, method: &str, path: &str, expires: i64) -> String {
        format!("expires={expires}&signature={}", self.signature(method, path, expires))
    }

    /// Checks the `expires` and `signature` query values of a request at `now` (Unix
    /// seconds). The comparison takes constant time: a mismatch says nothing about how
    /// close it was.
    pub fn verify(
        &self,
        method: &str,
        path: &str,
        expires: &str,
        signature: &str,
        now: i64,
    ) -> Result<(), SignatureError> {
        let expires_at: i64 = expires.parse().map_err(|_| SignatureError::BadSignature)?;
        let signature = hex::decode(signature).map_err(|_| SignatureError::BadSignature)?;
        self.mac_of(method, path, expires_at).verify_slice(&signature).map_err(|_| SignatureError::BadSignature)?;
        if now > expires_at {
            return Err(SignatureError::Expired);
        }
        Ok(())
    }
}

/// The `expires` and `signature` values of a query string (empty when absent).
pub fn signed_query_values(query: &str) -> (&str, &str) {
    let (mut expires, mut signature) = ("", "");
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("expires", value)) => expires = value,
            Some(("signature", value)) => signature = value,
            _ => {}
        }
    }
    (expires, signature)
}

/// A new random secret of [`SECRET_BYTES`] bytes, from the operating system's source.
pub fn generate_secret() -> Vec<u8> {
    (0..SECRET_BYTES.div_ceil(16)).flat_map(|_| uuid::Uuid::new_v4().into_bytes()).take(SECRET_BYTES).collect()
}

/// Prefix of a Standard Webhooks secret; base64 of the key bytes follows.
pub const WEBHOOK_SECRET_PREFIX: &str = "whsec_";

/// A new Standard Webhooks secret: `whsec_` and base64 of [`SECRET_BYTES`] random bytes.
pub fn generate_webhook_secret() -> String {
    use base64::Engine;
    format!("{WEBHOOK_SECRET_PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(generate_secret()))
}

/// The `webhook-signature` value of Standard Webhooks: `v1,` and base64 of HMAC-SHA256
/// of `{id}.{timestamp}.{body}` under the key the `whsec_` secret encodes (a secret
/// that is not base64 after the prefix is used as its bytes).
pub fn webhook_signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> String {
    use base64::Engine;
    let encoded = secret.strip_prefix(WEBHOOK_SECRET_PREFIX).unwrap_or(secret);
    let key = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap_or_else(|_| encoded.as_bytes().to_vec());
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_path_expiry_and_signature_are_all_covered() {
        let signer = UrlSigner::new(b"secret");
        let now = 1_000;
        let (expires, signature) = ("1060", signer.signature("PUT", "uploads/o/i", 1060));
        assert_eq!(signer.verify("PUT", "uploads/o/i", expires, &signature, now), Ok(()));
        let refused =
            |method, path, expires: &str, signature: &str| signer.verify(method, path, expires, signature, now);
        assert_eq!(refused("GET", "uploads/o/i", expires, &signature), Err(SignatureError::BadSignature));
        assert_eq!(refused("PUT", "uploads/o/j", expires, &signature), Err(SignatureError::BadSignature));
        assert_eq!(refused("PUT", "uploads/o/i", "4660", &signature), Err(SignatureError::BadSignature));
        assert_eq!(refused("PUT", "uploads/o/i", "soon", &signature), Err(SignatureError::BadSignature));
        let mut tampered = signature.clone();
        tampered.replace_range(0..1, if signature.starts_with('0') { "1" } else { "0" });
        assert_eq!(refused("PUT", "uploads/o/i", expires, &tampered), Err(SignatureError::BadSignature));
        assert_eq!(refused("PUT", "uploads/o/i", expires, "zz"), Err(SignatureError::BadSignature));
        let past = signer.signature("PUT", "uploads/o/i", 999);
        assert_eq!(refused("PUT", "uploads/o/i", "999", &past), Err(SignatureError::Expired));
        assert_ne!(UrlSigner::new(b"other").signature("PUT", "uploads/o/i", 1060), signature);
    }

    #[test]
    fn query_values_are_found_in_any_order() {
        assert_eq!(signed_query_values("signature=ab&x=1&expires=5"), ("5", "ab"));
        assert_eq!(signed_query_values(""), ("", ""));
    }

    #[test]
    fn secrets_are_random_and_sized() {
        let (a, b) = (generate_secret(), generate_secret());
        assert_eq!(a.len(), SECRET_BYTES);
        assert_ne!(a, b);
    }
    #[test]
    fn webhook_signatures_match_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification and its libraries' tests.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let signature = webhook_signature(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body);
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let fresh = generate_webhook_secret();
        assert!(fresh.starts_with("whsec_") && fresh.len() > 40);
        assert_ne!(fresh, generate_webhook_secret());
    }
}
