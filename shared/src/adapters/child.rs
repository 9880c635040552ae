//! How every child process (ffmpeg, ffprobe, yt-dlp) is started and stopped:
//! - with a cleared environment, so that no secret of ours (the link secret, AWS
//!   credentials) reaches a program that reads untrusted media or pages;
//! - in a process group of its own, killed whole when its task ends (yt-dlp's ffmpeg
//!   with it);
//! - with Linux's parent-death signal, so that a killed `serve` leaves no child running;
//! - with its stderr kept to its last bytes, however much it writes.

use std::process::Stdio;

use tokio::io::AsyncReadExt;

/// Environment variables a child keeps: where programs and libraries are (a Lambda
/// layer's `LD_LIBRARY_PATH`), the locale, temporary files and fonts.
const KEPT_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "FONTCONFIG_FILE",
    "FONTCONFIG_PATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Bytes of a child's stderr kept (its last ones: where the error is).
pub const STDERR_TAIL_BYTES: usize = 16 * 1024;

/// A command for `program` set up as described above (stdin closed, stderr piped).
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command.env_clear();
    for name in KEPT_VARIABLES {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command.stdin(Stdio::null()).stderr(Stdio::piped()).kill_on_drop(true).process_group(0);
    // SAFETY: prctl is async-signal-safe and touches nothing of the parent's memory.
    #[cfg(target_os = "linux")]
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command
}

/// Kills a child's whole process group when dropped (the child itself is killed by
/// `kill_on_drop`; this reaches what it started).
pub struct GroupGuard(Option<u32>);

impl GroupGuard {
    pub fn of(child: &tokio::process::Child) -> Self {
        Self(child.id())
    }

    /// The child ended by itself (and waited for what it started): its group is gone,
    /// and its ID may be reused.
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(id) = self.0.and_then(|id| i32::try_from(id).ok()) {
            // SAFETY: a plain syscall; the group is the child's own (process_group(0)).
            unsafe {
                libc::kill(-id, libc::SIGKILL);
            }
        }
    }
}

/// How a child run by [`run_to_end`] ended.
pub enum Ended {
    /// It exited by itself: whether it succeeded, and the end of its stderr.
    Exited { success: bool, stderr: String },
    /// Its time ran out; it was killed.
    TimedOut,
    /// `cancelled` was set; it was killed.
    Cancelled,
}

/// Runs `command` (made by [`command`]) until it exits, `budget` passes or `cancelled`
/// is set, killing it (and what it started) in the last two cases. Err: it could not
/// be started.
pub async fn run_to_end(
    mut command: tokio::process::Command,
    budget: std::time::Duration,
    cancelled: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<Ended> {
    let mut child = command.spawn()?;
    let group = GroupGuard::of(&child);
    let stderr = tokio::spawn(stderr_tail(child.stderr.take()));
    let status = tokio::select! {
        status = child.wait() => status?,
        () = tokio::time::sleep(budget) => return Ok(Ended::TimedOut),
        () = crate::domain::media::until_cancelled(cancelled) => return Ok(Ended::Cancelled),
    };
    group.disarm();
    Ok(Ended::Exited { success: status.success(), stderr: stderr.await.unwrap_or_default() })
}

/// Reads `stderr` to its end, keeping its last [`STDERR_TAIL_BYTES`].
pub async fn stderr_tail(stderr: Option<tokio::process::ChildStderr>) -> String {
    let Some(mut stderr) = stderr else { return String::new() };
    let mut kept: Vec<u8> = Vec::new();
    let mut buffer = [0u8; 8192];
    while let Ok(read) = stderr.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        kept.extend_from_slice(&buffer[..read]);
        if kept.len() > 2 * STDERR_TAIL_BYTES {
            kept.drain(..kept.len() - STDERR_TAIL_BYTES);
        }
    }
    let start = kept.len().saturating_sub(STDERR_TAIL_BYTES);
    String::from_utf8_lossy(&kept[start..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_child_sees_none_of_our_secrets_and_its_stderr_is_kept_to_its_end() {
        // SAFETY: set once, read by the child only; no other test reads this name.
        unsafe { std::env::set_var("MEDIA_LINK_SECRET_FOR_THE_CHILD_TEST", "s3cr3t") };
        let output = command("env").stdout(Stdio::piped()).output().await.unwrap();
        let seen = String::from_utf8_lossy(&output.stdout);
        assert!(!seen.contains("s3cr3t"), "{seen}");
        assert!(seen.contains("PATH="), "programs are still found: {seen}");

        let mut child =
            command("sh").args(["-c", "head -c 100000 /dev/zero | tr '\\0' x >&2; echo END >&2"]).spawn().unwrap();
        let tail = stderr_tail(child.stderr.take()).await;
        child.wait().await.unwrap();
        assert!(tail.len() <= STDERR_TAIL_BYTES, "{}", tail.len());
        assert!(tail.ends_with("END\n"), "the end is kept");
    }
}
