//! Media in a local folder, served by `serve` at `/blobs/{key}` through URLs signed
//! with HMAC-SHA256 that carry their own expiry, like presigned S3 URLs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use bytes::Bytes;

use crate::core::signing::{generate_secret, SignatureError, UrlSigner};
use crate::domain::media::ports::{BlobStore, Chunks, UploadTarget};
use crate::domain::media::SealedBlob;
use crate::domain::time::Timestamp;

/// The URL path under which `serve` answers blob requests.
pub const BLOB_PATH_PREFIX: &str = "/blobs/";
/// Name of the file in the folder that keeps the signing secret across restarts.
const SECRET_FILE: &str = ".signing-secret";
/// Folder for bodies still arriving; a finished file is renamed into place.
/// The folder of partial uploads (and other files being written) inside the media folder.
pub const INCOMING: &str = ".incoming";

/// Why a signed blob request is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BlobAccessError {
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error("not a valid object key")]
    BadKey,
}

/// A folder of media objects with signed URL access.
pub struct LocalBlobStore {
    root: PathBuf,
    base_url: String,
    signer: UrlSigner,
    secret: Vec<u8>,
}

/// Reads the folder's signing secret, creating it (readable by its owner only) when
/// missing. Two processes opening the folder at once agree on one secret: a new secret
/// is written to a private file and linked into place, which fails if one is there.
pub fn load_or_create_secret(root: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::create_dir_all(root.join(INCOMING)).with_context(|| format!("creating {}", root.display()))?;
    let path = root.join(SECRET_FILE);
    if !path.exists() {
        let temporary = root.join(INCOMING).join(format!("secret-{}", uuid::Uuid::new_v4()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&temporary).with_context(|| format!("creating {}", temporary.display()))?;
        file.write_all(hex::encode(generate_secret()).as_bytes())?;
        file.sync_all()?;
        let linked = std::fs::hard_link(&temporary, &path);
        let _ = std::fs::remove_file(&temporary);
        match linked {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error).with_context(|| format!("writing {}", path.display())),
        }
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path)?.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "the signing secret was readable by others: made it private (0600)");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    hex::decode(text.trim()).with_context(|| format!("{} is not a hex secret", path.display()))
}

/// What an upload URL signs as its method: the method and the Content-Type it pins, so
/// a PUT with another type is refused like one to another key.
pub fn signed_put(content_type: &str) -> String {
    format!("PUT {content_type}")
}

/// The content type of an object, from its key's extension.
pub fn content_type_of(key: &str) -> &'static str {
    match key.rsplit_once('.').map(|(_, extension)| extension) {
        Some("json") => "application/json",
        Some("mp4") => "video/mp4",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("png") => "image/png",
        Some("zip") => "application/zip",
        _ => "application/octet-stream",
    }
}

/// How long a file PUT to an upload URL may wait for its finalize before it is removed.
pub const UNFINALIZED_KEPT_FOR: Duration = Duration::from_secs(24 * 60 * 60);

impl LocalBlobStore {
    /// Removes the files under `uploads/` last written more than `older_than` ago: uploads
    /// never finalized (finalize moves a file out of `uploads/` into a sealed folder).
    /// Answers how many were removed. Run by `serve`'s sweep.
    pub async fn remove_unfinalized(&self, older_than: Duration) -> anyhow::Result<usize> {
        let root = self.root.join("uploads");
        let cutoff = std::time::SystemTime::now().checked_sub(older_than).unwrap_or(std::time::UNIX_EPOCH);
        tokio::task::spawn_blocking(move || {
            let mut removed = 0;
            let Ok(organizations) = std::fs::read_dir(&root) else { return Ok(0) };
            for organization in organizations.flatten() {
                for upload in std::fs::read_dir(organization.path()).into_iter().flatten().flatten() {
                    let old = upload.metadata().and_then(|meta| meta.modified()).is_ok_and(|at| at < cutoff);
                    if old && upload.file_type().is_ok_and(|kind| kind.is_file()) {
                        std::fs::remove_file(upload.path())
                            .with_context(|| format!("removing {}", upload.path().display()))?;
                        removed += 1;
                    }
                }
            }
            Ok(removed)
        })
        .await?
    }

    /// Opens (creating) the folder; URLs start with `base_url`, e.g. `http://127.0.0.1:3000`.
    pub fn open(root: impl Into<PathBuf>, base_url: impl Into<String>) -> anyhow::Result<Self> {
        let root = root.into();
        std::fs::create_dir_all(root.join(INCOMING)).with_context(|| format!("creating {}", root.display()))?;
        // Absolute, so that the paths handed to ffprobe do not depend on its working folder.
        let root = root.canonicalize().with_context(|| format!("resolving {}", root.display()))?;
        let secret = load_or_create_secret(&root)?;
        Ok(Self {
            root,
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            signer: UrlSigner::new(&secret),
            secret,
        })
    }

    /// A URL allowing `method` on `key` until `expires` (Unix seconds).
    pub fn signed_url(&self, method: &str, key: &str, expires: i64) -> String {
        format!("{}{BLOB_PATH_PREFIX}{key}?{}", self.base_url, self.signer.query(method, key, expires))
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
        self.signer.verify(method, key, expires, signature, now.unix_seconds())?;
        Ok(path)
    }

    /// The address URLs start with.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The secret the folder's URLs are signed with (media links use it too).
    pub fn secret(&self) -> &[u8] {
        &self.secret
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

    /// A fresh file name for a body in progress, on the same file system as the objects.
    pub fn incoming_path(&self) -> PathBuf {
        self.root.join(INCOMING).join(uuid::Uuid::new_v4().to_string())
    }

    fn valid_path(&self, key: &str) -> anyhow::Result<PathBuf> {
        self.path(key).with_context(|| format!("object key {key:?} is not valid"))
    }

    /// Moves a finished file from the incoming folder to its object's path (a rename:
    /// an object is never seen half written).
    async fn place(incoming: &Path, path: &Path) -> anyhow::Result<()> {
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.with_context(|| format!("creating {}", parent.display()))?;
        }
        if let Err(error) = tokio::fs::rename(incoming, path).await {
            let _ = tokio::fs::remove_file(incoming).await;
            return Err(anyhow::Error::new(error).context(format!("storing {}", path.display())));
        }
        Ok(())
    }

    /// The newest file sealed under `folder` (sealed names are version 7 UUIDs, which
    /// sort by time), if any.
    async fn newest_sealed(folder: &Path) -> anyhow::Result<Option<PathBuf>> {
        let mut entries = match tokio::fs::read_dir(folder).await {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(anyhow::Error::new(error).context(format!("reading {}", folder.display()))),
        };
        let mut newest: Option<PathBuf> = None;
        while let Some(entry) = entries.next_entry().await? {
            let path = entry.path();
            if newest.as_ref().is_none_or(|best| path.file_name() > best.file_name()) {
                newest = Some(path);
            }
        }
        Ok(newest)
    }
}

#[async_trait]
impl BlobStore for LocalBlobStore {
    async fn upload_url(&self, key: &str, content_type: &str, ttl: Duration) -> anyhow::Result<UploadTarget> {
        self.valid_path(key)?;
        let url = self.signed_url(&signed_put(content_type), key, Timestamp::now().after(ttl).unix_seconds());
        Ok(UploadTarget { url, headers: vec![("Content-Type".to_owned(), content_type.to_owned())] })
    }

    async fn seal(&self, key: &str, sealed_prefix: &str) -> anyhow::Result<Option<SealedBlob>> {
        let uploaded = self.valid_path(key)?;
        let folder = self.valid_path(sealed_prefix)?;
        tokio::fs::create_dir_all(&folder).await.with_context(|| format!("creating {}", folder.display()))?;
        // Every seal moves the upload to a name of its own: a rename is atomic, so the
        // sealed file is whole, a later PUT makes a new upload file, and two finalizes
        // racing with a PUT each probe exactly the file they sealed.
        let name = uuid::Uuid::now_v7().to_string();
        let sealed = match tokio::fs::rename(&uploaded, folder.join(&name)).await {
            Ok(()) => folder.join(name),
            // Sealed by an earlier finalize (whose check failed, or which is still
            // running) and not uploaded again since: the newest sealed file is the upload.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => match Self::newest_sealed(&folder).await? {
                Some(path) => path,
                None => return Ok(None),
            },
            Err(error) => return Err(anyhow::Error::new(error).context(format!("sealing {}", uploaded.display()))),
        };
        let size = tokio::fs::metadata(&sealed).await.with_context(|| format!("reading {}", sealed.display()))?.len();
        let name = sealed.file_name().and_then(|name| name.to_str()).context("a sealed file name is not text")?;
        Ok(Some(SealedBlob { key: format!("{sealed_prefix}/{name}"), version: None, size }))
    }

    async fn discard(&self, blob: &SealedBlob) -> anyhow::Result<()> {
        let path = self.valid_path(&blob.key)?;
        match tokio::fs::remove_file(&path).await {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                Err(anyhow::Error::new(error).context(format!("removing {}", path.display())))
            }
            _ => Ok(()),
        }
    }

    async fn probe_location(&self, blob: &SealedBlob) -> anyhow::Result<String> {
        let path = self.valid_path(&blob.key)?;
        // The `file:` prefix keeps a path with a colon or a leading dash from being read
        // as a protocol or an option.
        Ok(format!("file:{}", path.display()))
    }

    async fn put(&self, key: &str, bytes: Bytes, _content_type: &str) -> anyhow::Result<()> {
        let path = self.valid_path(key)?;
        let incoming = self.incoming_path();
        tokio::fs::write(&incoming, &bytes).await.with_context(|| format!("writing {}", incoming.display()))?;
        Self::place(&incoming, &path).await
    }

    // Versions are not kept here: sealing moves a file to a key of its own.
    async fn download_url(&self, key: &str, _version: Option<&str>, ttl: Duration) -> anyhow::Result<String> {
        self.valid_path(key)?;
        Ok(self.signed_url("GET", key, Timestamp::now().after(ttl).unix_seconds()))
    }

    async fn put_file(&self, key: &str, source: &Path, _content_type: &str) -> anyhow::Result<()> {
        let path = self.valid_path(key)?;
        // Copied next to the objects first (the source may be on another file system),
        // then renamed: an object is never seen half written.
        let incoming = self.incoming_path();
        tokio::fs::copy(source, &incoming).await.with_context(|| format!("copying {}", source.display()))?;
        Self::place(&incoming, &path).await
    }

    async fn put_stream(&self, key: &str, mut chunks: Chunks, _content_type: &str) -> anyhow::Result<u64> {
        use futures::StreamExt;
        use tokio::io::AsyncWriteExt;
        let path = self.valid_path(key)?;
        // Written next to the objects as it arrives, then renamed into place.
        let incoming = self.incoming_path();
        let mut file =
            tokio::fs::File::create(&incoming).await.with_context(|| format!("creating {}", incoming.display()))?;
        let mut written = 0u64;
        while let Some(chunk) = chunks.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(error) => {
                    drop(file);
                    let _ = tokio::fs::remove_file(&incoming).await;
                    return Err(error);
                }
            };
            written += chunk.len() as u64;
            file.write_all(&chunk).await.with_context(|| format!("writing {}", incoming.display()))?;
        }
        file.flush().await?;
        drop(file);
        Self::place(&incoming, &path).await?;
        Ok(written)
    }

    async fn read_location(&self, key: &str, _version: Option<&str>) -> anyhow::Result<String> {
        Ok(format!("file:{}", self.valid_path(key)?.display()))
    }

    async fn delete(&self, key: &str) -> anyhow::Result<()> {
        let path = self.valid_path(key)?;
        match tokio::fs::remove_file(&path).await {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                Err(error).with_context(|| format!("deleting {}", path.display()))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::signing::signed_query_values;

    fn store() -> (tempfile::TempDir, LocalBlobStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalBlobStore::open(dir.path(), "http://h:1").unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn uploads_never_finalized_are_removed_after_their_day_and_assets_are_kept() {
        let (_dir, store) = store();
        store.put("uploads/o/pending", Bytes::from_static(b"x"), "video/mp4").await.unwrap();
        store.put("assets/o/sealed/file", Bytes::from_static(b"y"), "video/mp4").await.unwrap();
        assert_eq!(store.remove_unfinalized(UNFINALIZED_KEPT_FOR).await.unwrap(), 0, "not a day old yet");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(store.remove_unfinalized(Duration::from_millis(10)).await.unwrap(), 1);
        assert!(!store.path("uploads/o/pending").unwrap().exists());
        assert!(store.path("assets/o/sealed/file").unwrap().exists(), "finalized files stay");
    }

    #[test]
    fn signed_urls_are_checked_for_method_key_signature_and_time() {
        let (_dir, store) = store();
        let now = Timestamp::now();
        let expires = now.unix_seconds() + 60;
        let url = store.signed_url(&signed_put("video/mp4"), "uploads/o/i", expires);
        assert!(url.starts_with("http://h:1/blobs/uploads/o/i?"));
        let (expires_text, signature) = signed_query_values(url.split_once('?').unwrap().1);
        assert!(store.authorize(&signed_put("video/mp4"), "uploads/o/i", expires_text, signature, now).is_ok());
        let html = store.authorize(&signed_put("text/html"), "uploads/o/i", expires_text, signature, now);
        assert_eq!(html, Err(BlobAccessError::Signature(SignatureError::BadSignature)), "the type is pinned");
        let refused = store.authorize("GET", "uploads/o/i", expires_text, signature, now);
        assert_eq!(refused, Err(BlobAccessError::Signature(SignatureError::BadSignature)));
        assert_eq!(
            store.authorize(&signed_put("video/mp4"), "../x", expires_text, signature, now),
            Err(BlobAccessError::BadKey)
        );
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
    fn the_secret_survives_a_restart_and_only_its_owner_can_read_it() {
        let (dir, store) = store();
        let again = LocalBlobStore::open(dir.path(), "http://h:1").unwrap();
        assert_eq!(store.signed_url("PUT", "k", 5), again.signed_url("PUT", "k", 5));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(SECRET_FILE)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_secret_readable_by_others_is_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, _store) = store();
        let path = dir.path().join(SECRET_FILE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        LocalBlobStore::open(dir.path(), "http://h:1").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[tokio::test]
    async fn every_seal_gets_its_own_file_and_a_seal_without_an_upload_reuses_the_newest() {
        let (_dir, store) = store();
        let upload = store.path("uploads/o/i").unwrap();
        std::fs::create_dir_all(upload.parent().unwrap()).unwrap();
        assert!(store.seal("uploads/o/i", "assets/o/i").await.unwrap().is_none());
        std::fs::write(&upload, b"first").unwrap();
        let first = store.seal("uploads/o/i", "assets/o/i").await.unwrap().unwrap();
        std::fs::write(&upload, b"second!").unwrap();
        let second = store.seal("uploads/o/i", "assets/o/i").await.unwrap().unwrap();
        assert_ne!(first.key, second.key);
        assert_eq!(std::fs::read(store.path(&first.key).unwrap()).unwrap(), b"first");
        assert_eq!((second.size, std::fs::read(store.path(&second.key).unwrap()).unwrap()), (7, b"second!".to_vec()));
        let again = store.seal("uploads/o/i", "assets/o/i").await.unwrap().unwrap();
        assert_eq!(again, second);
    }

    #[tokio::test]
    async fn put_objects_are_read_through_signed_get_urls() {
        let (_dir, store) = store();
        store.put("responses/r.json", Bytes::from_static(b"{}"), "application/json").await.unwrap();
        assert_eq!(std::fs::read(store.path("responses/r.json").unwrap()).unwrap(), b"{}");
        let url = store.download_url("responses/r.json", None, Duration::from_secs(60)).await.unwrap();
        let (expires, signature) = signed_query_values(url.split_once('?').unwrap().1);
        assert!(store.authorize("GET", "responses/r.json", expires, signature, Timestamp::now()).is_ok());
        assert_eq!(content_type_of("responses/r.json"), "application/json");
    }
}
