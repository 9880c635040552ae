//! Media in a local folder, served by `serve` at `/blobs/{key}` through URLs signed
//! with HMAC-SHA256 that carry their own expiry, like presigned S3 URLs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::time::Timestamp;
use crate::domain::uploads::SealedBlob;
use crate::ports::BlobStore;

/// The URL path under which `serve` answers blob requests.
pub const BLOB_PATH_PREFIX: &str = "/blobs/";
/// Name of the file in the folder that keeps the signing secret across restarts.
const SECRET_FILE: &str = ".signing-secret";
/// Folder for PUT bodies still arriving; a finished upload is renamed into place.
const INCOMING: &str = ".incoming";

/// Why a signed blob request is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlobAccessError {
    #[error("the URL's signature does not match")]
    BadSignature,
    #[error("the URL has expired")]
    Expired,
    #[error("not a valid object key")]
    BadKey,
}

/// A folder of media objects with signed URL access.
pub struct LocalBlobStore {
    root: PathBuf,
    base_url: String,
    secret: Vec<u8>,
}

impl LocalBlobStore {
    /// Opens (creating) the folder; URLs start with `base_url`, e.g. `http://127.0.0.1:3000`.
    pub fn open(root: impl Into<PathBuf>, base_url: impl Into<String>) -> anyhow::Result<Self> {
        let root = root.into();
        std::fs::create_dir_all(root.join(INCOMING)).with_context(|| format!("creating {}", root.display()))?;
        // Absolute, so that the paths handed to ffprobe do not depend on its working folder.
        let root = root.canonicalize().with_context(|| format!("resolving {}", root.display()))?;
        let secret_path = root.join(SECRET_FILE);
        let secret = match std::fs::read_to_string(&secret_path) {
            Ok(text) => hex::decode(text.trim()).context("the signing secret file is not hex")?,
            Err(_) => {
                let secret: Vec<u8> = (0..2).flat_map(|_| uuid::Uuid::new_v4().into_bytes()).collect();
                std::fs::write(&secret_path, hex::encode(&secret))
                    .with_context(|| format!("writing {}", secret_path.display()))?;
                secret
            }
        };
        Ok(Self { root, base_url: base_url.into().trim_end_matches('/').to_owned(), secret })
    }

    fn signature(&self, method: &str, key: &str, expires: i64) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.secret).unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        mac.update(format!("{method}\n{key}\n{expires}").as_bytes());
        mac
    }

    /// A URL allowing `method` on `key` until `expires` (Unix seconds).
    pub fn signed_url(&self, method: &str, key: &str, expires: i64) -> String {
        let signature = hex::encode(self.signature(method, key, expires).finalize().into_bytes());
        format!("{}{BLOB_PATH_PREFIX}{key}?expires={expires}&signature={signature}", self.base_url)
    }

    /// Checks a request's signature and expiry and returns the object's path.
    pub fn authorize(
        &self,
        method: &str,
        key: &str,
        expires: &str,
        signature: &str,
        now: Timestamp,
    ) -> Result<PathBuf, BlobAccessError> {
        let path = self.path(key).ok_or(BlobAccessError::BadKey)?;
        let expires_at: i64 = expires.parse().map_err(|_| BlobAccessError::BadSignature)?;
        let signature = hex::decode(signature).map_err(|_| BlobAccessError::BadSignature)?;
        // Constant-time comparison: a mismatch says nothing about how close it was.
        self.signature(method, key, expires_at).verify_slice(&signature).map_err(|_| BlobAccessError::BadSignature)?;
        if now.datetime().unix_timestamp() > expires_at {
            return Err(BlobAccessError::Expired);
        }
        Ok(path)
    }

    /// The file of a key made of plain segments (no `..`, no hidden names).
    pub fn path(&self, key: &str) -> Option<PathBuf> {
        let plain = |segment: &str| {
            !segment.is_empty()
                && !segment.starts_with('.')
                && segment.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        key.split('/').all(plain).then(|| self.root.join(key))
    }

    /// A fresh file name for a PUT body in progress, on the same file system as the objects.
    pub fn incoming_path(&self) -> PathBuf {
        self.root.join(INCOMING).join(uuid::Uuid::new_v4().to_string())
    }
}

#[async_trait]
impl BlobStore for LocalBlobStore {
    async fn upload_url(&self, key: &str, ttl: Duration) -> anyhow::Result<String> {
        anyhow::ensure!(self.path(key).is_some(), "object key {key:?} is not valid");
        let expires = Timestamp::now().datetime().unix_timestamp() + ttl.as_secs() as i64;
        Ok(self.signed_url("PUT", key, expires))
    }

    async fn seal(&self, key: &str, sealed_key: &str) -> anyhow::Result<Option<SealedBlob>> {
        let invalid = |key: &str| format!("object key {key:?} is not valid");
        let uploaded = self.path(key).with_context(|| invalid(key))?;
        let sealed = self.path(sealed_key).with_context(|| invalid(sealed_key))?;
        if let Some(parent) = sealed.parent() {
            tokio::fs::create_dir_all(parent).await.with_context(|| format!("creating {}", parent.display()))?;
        }
        // A rename is atomic: the sealed file is whole, and a later PUT to the upload URL
        // makes a new file instead of changing this one.
        match tokio::fs::rename(&uploaded, &sealed).await {
            Ok(()) => {}
            // Sealed by an earlier finalize whose check failed, and not uploaded again since.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(anyhow::Error::new(error).context(format!("sealing {}", uploaded.display()))),
        }
        match tokio::fs::metadata(&sealed).await {
            Ok(metadata) => Ok(Some(SealedBlob { key: sealed_key.to_owned(), version: None, size: metadata.len() })),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(anyhow::Error::new(error).context(format!("reading {}", sealed.display()))),
        }
    }

    async fn probe_location(&self, blob: &SealedBlob) -> anyhow::Result<String> {
        let path = self.path(&blob.key).with_context(|| format!("object key {:?} is not valid", blob.key))?;
        // The `file:` prefix keeps a path with a colon or a leading dash from being read
        // as a protocol or an option.
        Ok(format!("file:{}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, LocalBlobStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalBlobStore::open(dir.path(), "http://h:1").unwrap();
        (dir, store)
    }

    fn query(url: &str) -> (String, String) {
        let query = url.split_once('?').unwrap().1;
        let (expires, signature) = query.split_once('&').unwrap();
        (expires.trim_start_matches("expires=").to_owned(), signature.trim_start_matches("signature=").to_owned())
    }

    #[test]
    fn signed_urls_are_checked_for_method_key_signature_and_time() {
        let (_dir, store) = store();
        let now = Timestamp::now();
        let expires = now.datetime().unix_timestamp() + 60;
        let url = store.signed_url("PUT", "uploads/o/i", expires);
        assert!(url.starts_with("http://h:1/blobs/uploads/o/i?"));
        let (expires_text, signature) = query(&url);
        assert!(store.authorize("PUT", "uploads/o/i", &expires_text, &signature, now).is_ok());
        let denied =
            |method, key, expires: &str, signature: &str| store.authorize(method, key, expires, signature, now);
        assert_eq!(denied("GET", "uploads/o/i", &expires_text, &signature), Err(BlobAccessError::BadSignature));
        assert_eq!(denied("PUT", "uploads/o/j", &expires_text, &signature), Err(BlobAccessError::BadSignature));
        let later = (expires + 3600).to_string();
        assert_eq!(denied("PUT", "uploads/o/i", &later, &signature), Err(BlobAccessError::BadSignature));
        let mut tampered = signature.clone();
        tampered.replace_range(0..1, if signature.starts_with('0') { "1" } else { "0" });
        assert_eq!(denied("PUT", "uploads/o/i", &expires_text, &tampered), Err(BlobAccessError::BadSignature));
        let past = now.datetime().unix_timestamp() - 1;
        let (past_text, past_signature) = query(&store.signed_url("PUT", "uploads/o/i", past));
        assert_eq!(denied("PUT", "uploads/o/i", &past_text, &past_signature), Err(BlobAccessError::Expired));
    }

    #[test]
    fn keys_cannot_leave_the_folder() {
        let (_dir, store) = store();
        for key in ["../x", "a/../../x", "/abs", "a//b", ".signing-secret", "a/.incoming/x", "a b"] {
            assert!(store.path(key).is_none(), "{key}");
        }
        assert!(store.path("uploads/6f1c/abc-1.mp4").is_some());
    }

    #[test]
    fn the_secret_survives_a_restart() {
        let (dir, store) = store();
        let again = LocalBlobStore::open(dir.path(), "http://h:1").unwrap();
        assert_eq!(store.signed_url("PUT", "k", 5), again.signed_url("PUT", "k", 5));
    }
}
