//! A file a writer is still appending to (a join's MP4 as ffmpeg writes it): read in
//! order as its bytes become final, and each region's disk given back once it is sent
//! (its blocks punched out; the file keeps its length, so the writer sees no change).

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The file's length now; 0 while it does not exist yet (the writer has not started).
pub async fn length(path: &Path) -> anyhow::Result<u64> {
    match tokio::fs::metadata(path).await {
        Ok(metadata) => Ok(metadata.len()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(error) => Err(error).with_context(|| format!("reading the length of {}", path.display())),
    }
}

/// The `len` bytes of the file from `offset`, which it holds.
pub async fn read_range(path: &Path, offset: u64, len: usize) -> anyhow::Result<Vec<u8>> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let file = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let mut bytes = vec![0; len];
        file.read_exact_at(&mut bytes, offset).with_context(|| format!("reading {}", path.display()))?;
        Ok(bytes)
    })
    .await?
}

/// Gives back the disk of the `len` bytes from `offset` (a hole punched: they read as
/// zeros after). False where the file system cannot: the bytes then stay on the disk.
pub async fn release(path: &Path, offset: u64, len: u64) -> anyhow::Result<bool> {
    let path: PathBuf = path.to_owned();
    tokio::task::spawn_blocking(move || punch(&path, offset, len)).await?
}

#[cfg(target_os = "linux")]
fn punch(path: &Path, offset: u64, len: u64) -> anyhow::Result<bool> {
    use std::os::fd::AsRawFd;
    let file =
        std::fs::OpenOptions::new().write(true).open(path).with_context(|| format!("opening {}", path.display()))?;
    let (offset, len) = (i64::try_from(offset)?, i64::try_from(len)?);
    // SAFETY: fallocate reads only its integer arguments and the descriptor, which `file`
    // keeps open for the call.
    let punched = unsafe {
        libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, offset, len)
    };
    if punched == 0 {
        return Ok(true);
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EOPNOTSUPP) => Ok(false),
        _ => Err(error).with_context(|| format!("giving back the disk of {}", path.display())),
    }
}

#[cfg(not(target_os = "linux"))]
fn punch(_path: &Path, _offset: u64, _len: u64) -> anyhow::Result<bool> {
    Ok(false)
}

/// The disk the file takes now (its allocated blocks), in bytes.
pub fn allocated(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(path)?.blocks() * 512)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_released_range_reads_as_zeros_and_leaves_the_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("growing");
        assert_eq!(length(&path).await.unwrap(), 0, "not written yet");
        std::fs::write(&path, vec![7u8; 3 << 20]).unwrap();
        assert_eq!(read_range(&path, 1 << 20, 4).await.unwrap(), [7; 4]);
        let before = allocated(&path).unwrap();
        // Linux's file systems of tasks (ext4 here and on CI, Lambda's /tmp) punch holes.
        assert!(release(&path, 0, 2 << 20).await.unwrap(), "a hole punched");
        assert_eq!(length(&path).await.unwrap(), 3 << 20);
        assert_eq!(read_range(&path, (1 << 20) - 2, 4).await.unwrap(), [0; 4]);
        assert_eq!(read_range(&path, (2 << 20) - 2, 4).await.unwrap(), [0, 0, 7, 7]);
        assert!(allocated(&path).unwrap() <= before - (2 << 20), "{before}");
    }
}
