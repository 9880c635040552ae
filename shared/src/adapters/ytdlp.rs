//! Videos of video-sharing sites with `yt-dlp` as a child process: it reads the page and
//! says which media make the video (`-J`); the adapter checks every host involved with
//! the SSRF guard before anything is fetched.
//!
//! Who connects where:
//! - Every connection yt-dlp makes (the page, its redirects, hand-offs to other hosts,
//!   manifests and segments, and those of the ffmpeg it starts) goes through a
//!   [`GuardedProxy`] of its own, which checks each host with the guard and pins the
//!   connection to the checked address; a refusal is answered with a generic message.
//! - One progressive file over http(s), the common case: fetched by [`HttpDownloader`],
//!   which checks every redirect hop and pins each connection to the checked addresses.
//! - Segmented media (HLS, DASH) or separate video and audio to merge: yt-dlp fetches
//!   them from the info it printed (`--load-info-json`), through the proxy; the hosts of
//!   the URLs in that info are also checked before it runs.
//!
//! The size limit is kept by the adapter, not by yt-dlp's `--max-filesize`, which limits
//! each HTTP request rather than the whole (it silently skips a DASH fragment over the
//! limit and still succeeds): declared sizes are checked first, the folder yt-dlp writes
//! to is watched while it runs, and the finished file is checked again.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, Context};
use async_trait::async_trait;
use serde::Deserialize;

use crate::adapters::http_download::{size_text, HttpDownloader};
use crate::adapters::proxy::GuardedProxy;
use crate::core::ssrf::resolve_allowed;
use crate::domain::media::ports::DownloadError;
use crate::domain::sites::SiteVideo;
use crate::domain::sites::SiteVideos;

/// Longest a page may take to read.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest yt-dlp may take to fetch a video: the default task budget (the worker's own
/// deadline usually ends it first).
const FETCH_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How often the folder yt-dlp writes to is measured.
const SIZE_CHECK_INTERVAL: Duration = Duration::from_millis(250);
/// The best picture up to 1080 lines with the best sound (merged when the site keeps
/// them apart, as YouTube does above 360p), else the best single file; a single
/// progressive file over http(s) is then fetched by [`HttpDownloader`].
const FORMAT: &str = "bv*[height<=?1080]+ba/b[height<=?1080]/bv*+ba/b";
/// Options of every run: one video, nothing read from the user's configuration, cache
/// or plugins, a playlist listed rather than read video by video.
const COMMON_OPTIONS: [&str; 6] =
    ["--no-playlist", "--flat-playlist", "--no-warnings", "--ignore-config", "--no-cache-dir", "--no-plugin-dirs"];

/// `yt-dlp` as a child process.
pub struct YtDlp {
    program: PathBuf,
    ffmpeg: Option<PathBuf>,
    allow_private: bool,
    http: HttpDownloader,
}

impl YtDlp {
    /// Uses the given program (`yt-dlp` on the PATH, `$YT_DLP_PATH`); `allow_private` lets
    /// it reach private addresses (a local `serve`), as [`HttpDownloader`] does.
    pub fn new(program: impl Into<PathBuf>, allow_private: bool) -> Self {
        Self { program: program.into(), ffmpeg: None, allow_private, http: HttpDownloader::new(allow_private) }
    }

    /// Has yt-dlp merge and remux with this ffmpeg rather than the one on the PATH.
    pub fn with_ffmpeg(mut self, ffmpeg: impl Into<PathBuf>) -> Self {
        self.ffmpeg = Some(ffmpeg.into());
        self
    }

    /// A yt-dlp command whose every connection (and its ffmpeg's) goes through `proxy`.
    fn command(&self, proxy: &GuardedProxy) -> tokio::process::Command {
        let mut command = super::child::command(&self.program);
        command.args(COMMON_OPTIONS).args(["--proxy", proxy.url()]).stdout(Stdio::piped());
        if let Some(ffmpeg) = &self.ffmpeg {
            command.arg("--ffmpeg-location").arg(ffmpeg);
        }
        command
    }

    fn not_started(&self, error: std::io::Error) -> DownloadError {
        let program = self.program.display();
        if error.kind() == ErrorKind::NotFound {
            return DownloadError::Failed(anyhow!(
                "the yt-dlp program {program} was not found: `./scripts/test.sh` (infra/emulators.sh install) \
                 installs it into .local/venv/bin, on AWS it comes from a Lambda layer; YT_DLP_PATH names it"
            ));
        }
        DownloadError::Failed(anyhow::Error::new(error).context(format!("running {program}")))
    }

    /// The info yt-dlp prints for the page at `url` (checked first), parsed and raw.
    async fn read_info(&self, url: &str) -> Result<(Info, Vec<u8>), DownloadError> {
        let page = url::Url::parse(url).map_err(|error| DownloadError::Refused(format!("not a valid URL: {error}")))?;
        self.check_host(&page).await.map_err(DownloadError::Refused)?;
        let proxy = self.proxy().await?;
        let mut command = self.command(&proxy);
        command.args(["-J", "-f", FORMAT, "--"]).arg(page.as_str());
        let output = match tokio::time::timeout(DESCRIBE_TIMEOUT, command.output()).await {
            Err(_) => {
                let error =
                    anyhow!("yt-dlp took longer than {} s to read the page at {url}", DESCRIBE_TIMEOUT.as_secs());
                return Err(DownloadError::Failed(error));
            }
            Ok(Err(error)) => return Err(self.not_started(error)),
            Ok(Ok(output)) => output,
        };
        if proxy.refused() > 0 {
            return Err(DownloadError::Refused(guarded_refusal(url)));
        }
        if !output.status.success() {
            let reason = yt_dlp_error(&output.stderr);
            return Err(DownloadError::Refused(format!("the page at {url} has no video yt-dlp can read: {reason}")));
        }
        let info = serde_json::from_slice(&output.stdout)
            .context("yt-dlp printed info that could not be read")
            .map_err(DownloadError::Failed)?;
        Ok((info, output.stdout))
    }

    /// A guarded proxy for one run of yt-dlp.
    async fn proxy(&self) -> Result<GuardedProxy, DownloadError> {
        GuardedProxy::start(self.allow_private)
            .await
            .context("starting the guarded proxy for yt-dlp")
            .map_err(DownloadError::Failed)
    }

    async fn check_host(&self, url: &url::Url) -> Result<(), String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("{url} is not an http(s) URL"));
        }
        resolve_allowed(url, self.allow_private).await.map(drop)
    }

    /// Checks the host of every URL the selected formats fetch from (each host once).
    async fn check_media(&self, info: &Info) -> Result<(), DownloadError> {
        let mut checked = BTreeSet::new();
        for media in info.media_urls() {
            let media = url::Url::parse(media)
                .map_err(|error| DownloadError::Refused(format!("the video's media has a bad URL: {error}")))?;
            if checked.insert((media.scheme().to_owned(), media.host_str().map(str::to_owned), media.port())) {
                self.check_host(&media).await.map_err(|reason| {
                    tracing::warn!(reason, "a video's media was refused by the guard");
                    DownloadError::Refused(guarded_refusal("the video's media"))
                })?;
            }
        }
        Ok(())
    }

    /// Has yt-dlp fetch the video described by `raw_info` into `output`.
    async fn fetch_with_yt_dlp(&self, raw_info: &[u8], output: &Path, max_bytes: u64) -> Result<u64, DownloadError> {
        let failed = DownloadError::Failed;
        let parent = output.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let work = tempfile::Builder::new()
            .prefix(".yt-dlp-")
            .tempdir_in(parent)
            .with_context(|| format!("creating a folder in {}", parent.display()))
            .map_err(failed)?;
        let info_path = work.path().join("info.json");
        tokio::fs::write(&info_path, info_without_page(raw_info).map_err(failed)?)
            .await
            .context("writing yt-dlp's info")
            .map_err(failed)?;
        let media = work.path().join("media");
        tokio::fs::create_dir(&media).await.context("creating the media folder").map_err(failed)?;
        let proxy = self.proxy().await?;
        let mut command = self.command(&proxy);
        command.args(["-f", FORMAT, "--merge-output-format", "mp4", "--no-progress"]);
        command.args(["--print", "after_move:filepath", "--load-info-json"]).arg(&info_path);
        command.arg("-o").arg(media.join("video.%(ext)s"));
        let child = command.spawn().map_err(|error| self.not_started(error))?;
        // Dropping the child (on a timeout or an oversized folder) kills it, and the
        // guard its process group (the ffmpeg yt-dlp started).
        let group = super::child::GroupGuard::of(&child);
        let finished = child.wait_with_output();
        tokio::pin!(finished);
        let deadline = tokio::time::sleep(FETCH_TIMEOUT);
        tokio::pin!(deadline);
        let mut size_checks = tokio::time::interval(SIZE_CHECK_INTERVAL);
        let finished = loop {
            tokio::select! {
                finished = &mut finished => break finished.context("waiting for yt-dlp").map_err(failed)?,
                () = &mut deadline => {
                    let error = anyhow!("yt-dlp took longer than {} s to fetch the video", FETCH_TIMEOUT.as_secs());
                    return Err(failed(error));
                }
                _ = size_checks.tick() => {
                    if folder_bytes(&media).await > max_bytes {
                        return Err(too_large(max_bytes));
                    }
                }
            }
        };
        group.disarm();
        if proxy.refused() > 0 {
            return Err(DownloadError::Refused(guarded_refusal("the video")));
        }
        if !finished.status.success() {
            return Err(failed(anyhow!("yt-dlp could not fetch the video: {}", yt_dlp_error(&finished.stderr))));
        }
        let stdout = String::from_utf8_lossy(&finished.stdout);
        let written = stdout.lines().rev().map(str::trim).find(|line| !line.is_empty());
        let written = PathBuf::from(written.ok_or_else(|| failed(anyhow!("yt-dlp wrote no file")))?);
        let size =
            tokio::fs::metadata(&written).await.context("reading the size of yt-dlp's file").map_err(failed)?.len();
        if size > max_bytes {
            return Err(too_large(max_bytes));
        }
        tokio::fs::rename(&written, output).await.context("moving yt-dlp's file into place").map_err(failed)?;
        Ok(size)
    }
}

/// What a refusal of the guard says: the same whatever was refused and why, so that an
/// answer tells nothing of what listens at private addresses.
fn guarded_refusal(what: &str) -> String {
    format!("{what} leads to an address this service does not connect to (a private or reserved one)")
}

#[async_trait]
impl SiteVideos for YtDlp {
    async fn describe(&self, url: &str) -> Result<SiteVideo, DownloadError> {
        let (info, _) = self.read_info(url).await?;
        let video = info.site_video(url)?;
        // Media the guard refuses refuse the run at its start, not at its first task.
        self.check_media(&info).await?;
        Ok(video)
    }

    async fn download(&self, url: &str, output: &Path, max_bytes: u64) -> Result<u64, DownloadError> {
        let (info, raw) = self.read_info(url).await?;
        info.site_video(url)?;
        self.check_media(&info).await?;
        if info.declared_bytes().is_some_and(|declared| declared > max_bytes) {
            return Err(too_large(max_bytes));
        }
        let progressive = match info.selected_formats()[..] {
            [format] => format.progressive_url().map(|media| (media, format.headers())),
            _ => None,
        };
        match progressive {
            Some((media, headers)) => self.http.download_with_headers(media, &headers, output, max_bytes).await,
            None => self.fetch_with_yt_dlp(&raw, output, max_bytes).await,
        }
    }
}

/// What `yt-dlp -J` prints of a video (or a playlist), as far as it is read here.
#[derive(Debug, Deserialize)]
struct Info {
    #[serde(rename = "_type")]
    kind: Option<String>,
    id: Option<String>,
    title: Option<String>,
    extractor_key: Option<String>,
    webpage_url: Option<String>,
    channel_id: Option<String>,
    uploader_id: Option<String>,
    duration: Option<f64>,
    live_status: Option<String>,
    entries: Option<Vec<serde::de::IgnoredAny>>,
    /// The selected format, when it is one.
    #[serde(flatten)]
    format: MediaFormat,
    /// The selected formats, when they are merged.
    requested_formats: Option<Vec<MediaFormat>>,
}

#[derive(Debug, Default, Deserialize)]
struct MediaFormat {
    url: Option<String>,
    protocol: Option<String>,
    manifest_url: Option<String>,
    fragment_base_url: Option<String>,
    fragments: Option<Vec<Fragment>>,
    http_headers: Option<BTreeMap<String, String>>,
    filesize: Option<f64>,
    filesize_approx: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct Fragment {
    url: Option<String>,
}

impl MediaFormat {
    /// The URL of a single file fetched with plain http(s), if this is one.
    fn progressive_url(&self) -> Option<&str> {
        self.url.as_deref().filter(|_| matches!(self.protocol.as_deref(), Some("http" | "https")))
    }

    fn headers(&self) -> Vec<(String, String)> {
        self.http_headers.clone().unwrap_or_default().into_iter().collect()
    }
}

impl Info {
    /// The video, or why it cannot be used (a playlist, a live stream).
    fn site_video(&self, url: &str) -> Result<SiteVideo, DownloadError> {
        let refused = DownloadError::Refused;
        if self.kind.as_deref() == Some("playlist") {
            let count = self.entries.as_ref().map_or(0, Vec::len);
            return Err(refused(format!("the page at {url} lists {count} videos: give the URL of one of them")));
        }
        match self.live_status.as_deref() {
            Some("is_live") => return Err(refused(format!("the video at {url} is a live stream"))),
            Some("is_upcoming") => return Err(refused(format!("the video at {url} has not started yet"))),
            _ => {}
        }
        let video_id = self.id.clone().ok_or_else(|| DownloadError::Failed(anyhow!("yt-dlp gave the video no id")))?;
        Ok(SiteVideo {
            site: site_name(self.extractor_key.as_deref().unwrap_or("Generic")),
            title: self.title.clone().unwrap_or_else(|| video_id.clone()),
            video_id,
            page_url: self.webpage_url.clone().unwrap_or_else(|| url.to_owned()),
            channel_id: self.channel_id.clone().or_else(|| self.uploader_id.clone()),
            duration_ms: self
                .duration
                .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
                .map(|seconds| (seconds * 1000.0).round() as u64),
        })
    }

    fn selected_formats(&self) -> Vec<&MediaFormat> {
        match &self.requested_formats {
            Some(formats) if !formats.is_empty() => formats.iter().collect(),
            _ => vec![&self.format],
        }
    }

    /// Every absolute URL the selected formats fetch from.
    fn media_urls(&self) -> Vec<&str> {
        let mut urls = Vec::new();
        for format in self.selected_formats() {
            urls.extend([&format.url, &format.manifest_url, &format.fragment_base_url].into_iter().flatten());
            let fragments = format.fragments.iter().flatten();
            urls.extend(fragments.filter_map(|fragment| fragment.url.as_ref()));
        }
        urls.into_iter().map(String::as_str).collect()
    }

    /// The size the site declares for the selected formats (those it declares), if any.
    fn declared_bytes(&self) -> Option<u64> {
        let sizes = self.selected_formats().into_iter().filter_map(|format| format.filesize.or(format.filesize_approx));
        sizes.map(|size| size.max(0.0) as u64).reduce(u64::saturating_add)
    }
}

/// The site as the port names it: yt-dlp's extractor, with the generic one and its
/// `<video>` tag reader both `generic`.
fn site_name(extractor_key: &str) -> String {
    match extractor_key {
        "Generic" | "HTML5MediaEmbed" => "generic".to_owned(),
        other => other.to_lowercase(),
    }
}

/// The info without the page's URL, so that yt-dlp, when fetching the media fails,
/// does not read the page again and fetch media whose hosts were never checked.
fn info_without_page(raw_info: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut info: serde_json::Value = serde_json::from_slice(raw_info).context("reading yt-dlp's info")?;
    if let Some(info) = info.as_object_mut() {
        info.remove("webpage_url");
    }
    serde_json::to_vec(&info).context("writing yt-dlp's info")
}

/// yt-dlp's reason for failing: its last `ERROR:` line (else its last line), without
/// the cause's internals and the plea to report a bug.
fn yt_dlp_error(stderr: &[u8]) -> String {
    let stderr = String::from_utf8_lossy(stderr);
    let lines = || stderr.lines().rev().map(str::trim);
    let line = lines()
        .find_map(|line| line.strip_prefix("ERROR:"))
        .or_else(|| lines().find(|line| !line.is_empty()))
        .unwrap_or("yt-dlp failed without saying why");
    let line = line.split("; please report this issue").next().unwrap_or(line);
    let line = line.split(" (caused by ").next().unwrap_or(line);
    line.trim().to_owned()
}

fn too_large(max_bytes: u64) -> DownloadError {
    DownloadError::Refused(format!("the file is larger than the limit of {}", size_text(max_bytes)))
}

/// The bytes of the files in `folder`, but for a merge's output (`.temp.` in its name),
/// which only copies the parts already counted.
async fn folder_bytes(folder: &Path) -> u64 {
    let Ok(mut entries) = tokio::fs::read_dir(folder).await else { return 0 };
    let mut total: u64 = 0;
    while let Ok(Some(entry)) = entries.next_entry().await {
        if entry.file_name().to_string_lossy().contains(".temp.") {
            continue;
        }
        if let Ok(metadata) = entry.metadata().await {
            total = total.saturating_add(metadata.len());
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// `yt-dlp -J` of a page with one `<video>` tag, as yt-dlp 2026.10.26 prints it
    /// (shortened).
    const HTML5_PAGE_INFO: &str = r#"{
        "formats": [{"url": "http://127.0.0.1:8000/clip.mp4", "ext": "mp4", "protocol": "http", "format_id": "0"}],
        "id": "page-1", "title": "Test clip (1)", "extractor": "html5", "extractor_key": "HTML5MediaEmbed",
        "webpage_url": "http://127.0.0.1:8000/page.html", "original_url": "http://127.0.0.1:8000/page.html",
        "url": "http://127.0.0.1:8000/clip.mp4", "ext": "mp4", "protocol": "http", "format_id": "0",
        "http_headers": {"User-Agent": "Mozilla/5.0", "Referer": "http://127.0.0.1:8000/page.html"},
        "_type": "video"
    }"#;

    /// A site's video whose best formats are separate video and audio.
    const MERGED_INFO: &str = r#"{
        "id": "dQw4w9WgXcQ", "title": "A song", "extractor": "youtube", "extractor_key": "Youtube",
        "webpage_url": "https://www.youtube.com/watch?v=dQw4w9WgXcQ", "uploader_id": "@someone",
        "duration": 212.5, "live_status": "not_live", "format_id": "137+140", "protocol": "https+https",
        "requested_formats": [
            {"url": "https://video.example/v.mp4", "protocol": "https", "filesize": 3000},
            {"url": "https://audio.example/a.m4a", "protocol": "https", "filesize_approx": 500.0,
             "fragment_base_url": "https://fragments.example/", "fragments": [{"path": "1.m4s"}, {"url": "https://more.example/2.m4s"}]}
        ],
        "_type": "video"
    }"#;

    fn info(text: &str) -> Info {
        serde_json::from_str(text).unwrap()
    }

    fn refusal<T: std::fmt::Debug>(result: Result<T, DownloadError>) -> String {
        match result {
            Err(DownloadError::Refused(message)) => message,
            Err(DownloadError::Failed(error)) => panic!("failed, not refused: {error:#}"),
            Ok(value) => panic!("not refused: {value:?}"),
        }
    }

    #[test]
    fn the_generic_extractors_info_reads_as_a_generic_site_video() {
        let info = info(HTML5_PAGE_INFO);
        let video = info.site_video("http://127.0.0.1:8000/page.html").unwrap();
        assert_eq!(
            video,
            SiteVideo {
                site: "generic".into(),
                video_id: "page-1".into(),
                title: "Test clip (1)".into(),
                page_url: "http://127.0.0.1:8000/page.html".into(),
                channel_id: None,
                duration_ms: None,
            }
        );
        assert_eq!(info.media_urls(), ["http://127.0.0.1:8000/clip.mp4"]);
        let [format] = info.selected_formats()[..] else { panic!("not one format") };
        assert_eq!(format.progressive_url(), Some("http://127.0.0.1:8000/clip.mp4"));
        assert!(format.headers().contains(&("Referer".into(), "http://127.0.0.1:8000/page.html".into())));
        assert_eq!(info.declared_bytes(), None);
    }

    #[test]
    fn a_sites_info_gives_its_name_uploader_duration_and_every_media_url() {
        let info = info(MERGED_INFO);
        let video = info.site_video("https://youtu.be/dQw4w9WgXcQ").unwrap();
        assert_eq!(video.site, "youtube");
        assert_eq!(video.page_url, "https://www.youtube.com/watch?v=dQw4w9WgXcQ");
        assert_eq!(video.channel_id.as_deref(), Some("@someone"));
        assert_eq!(video.duration_ms, Some(212_500));
        assert_eq!(
            info.media_urls(),
            [
                "https://video.example/v.mp4",
                "https://audio.example/a.m4a",
                "https://fragments.example/",
                "https://more.example/2.m4s"
            ]
        );
        assert_eq!(info.declared_bytes(), Some(3500));
        assert_eq!(info.selected_formats().len(), 2);
    }

    #[test]
    fn playlists_and_live_streams_are_refused() {
        let playlist = info(r#"{"_type": "playlist", "id": "list", "entries": [{"url": "a"}, {"url": "b"}]}"#);
        let message = refusal(playlist.site_video("https://example.com/list"));
        assert_eq!(message, "the page at https://example.com/list lists 2 videos: give the URL of one of them");
        let live = info(r#"{"id": "x", "live_status": "is_live"}"#);
        assert_eq!(
            refusal(live.site_video("https://example.com/x")),
            "the video at https://example.com/x is a live stream"
        );
    }

    #[test]
    fn yt_dlps_last_error_line_is_the_reason() {
        let stderr = b"[generic] Extracting URL: http://h/x\nERROR: first\n\
            ERROR: [generic] missing: Unable to download webpage: HTTP Error 404: File not found \
            (caused by <HTTPError 404: File not found>)\n\n";
        assert_eq!(
            yt_dlp_error(stderr),
            "[generic] missing: Unable to download webpage: HTTP Error 404: File not found"
        );
        let stderr = b"ERROR: something broke; please report this issue on  https://github.com/yt-dlp/yt-dlp/issues";
        assert_eq!(yt_dlp_error(stderr), "something broke");
        assert_eq!(yt_dlp_error(b"Traceback\nSyntaxError: bad\n"), "SyntaxError: bad");
        assert_eq!(yt_dlp_error(b""), "yt-dlp failed without saying why");
    }

    #[test]
    fn the_info_file_leaves_out_the_page_so_a_failed_fetch_does_not_read_it_again() {
        let written: serde_json::Value =
            serde_json::from_slice(&info_without_page(HTML5_PAGE_INFO.as_bytes()).unwrap()).unwrap();
        assert!(written.get("webpage_url").is_none());
        assert_eq!(written["url"], "http://127.0.0.1:8000/clip.mp4");
    }

    #[tokio::test]
    async fn a_missing_program_is_named_with_how_to_install_it() {
        let yt_dlp = YtDlp::new("/nonexistent/yt-dlp", true);
        let Err(DownloadError::Failed(error)) = yt_dlp.describe("http://127.0.0.1:9/video").await else {
            panic!("not a failure");
        };
        let message = format!("{error:#}");
        assert!(message.contains("/nonexistent/yt-dlp was not found"), "{message}");
        assert!(message.contains(".local/venv") && message.contains("Lambda layer"), "{message}");
    }

    #[tokio::test]
    async fn private_and_non_http_pages_are_refused_before_yt_dlp_runs() {
        // The program does not exist: a refusal (not a failure) shows it never ran.
        let yt_dlp = YtDlp::new("/nonexistent/yt-dlp", false);
        let message = refusal(yt_dlp.describe("http://127.0.0.1:9/video").await);
        assert!(message.contains("127.0.0.1") && message.contains("private"), "{message}");
        let folder = tempfile::tempdir().unwrap();
        let message = refusal(yt_dlp.download("http://[::1]:9/video", &folder.path().join("video"), 100).await);
        assert!(message.contains("::1"), "{message}");
        for url in ["file:///etc/passwd", "ytsearch:some song"] {
            assert!(refusal(yt_dlp.describe(url).await).contains("is not an http(s) URL"), "{url}");
        }
        assert!(refusal(yt_dlp.describe("not a url").await).starts_with("not a valid URL"));
    }

    #[tokio::test]
    async fn media_on_private_hosts_is_refused() {
        let yt_dlp = YtDlp::new("/nonexistent/yt-dlp", false);
        let metadata = info(
            r#"{"id": "x", "requested_formats": [
            {"url": "https://8.8.8.8/v.mp4", "protocol": "https"},
            {"url": "http://169.254.169.254/latest/a.m4a", "protocol": "http"}]}"#,
        );
        let message = refusal(yt_dlp.check_media(&metadata).await);
        assert_eq!(message, guarded_refusal("the video's media"), "generic: nothing of the address is told");
        let rtmp = info(r#"{"id": "x", "url": "rtmp://8.8.8.8/live", "protocol": "rtmp"}"#);
        assert_eq!(refusal(yt_dlp.check_media(&rtmp).await), guarded_refusal("the video's media"));
    }

    /// The path and `Referer` of each request a test site answered.
    type Referers = Arc<Mutex<Vec<(String, Option<String>)>>>;

    /// A local site serving the files of a folder: a page with a `<video>` tag and its
    /// MP4, the same clip as HLS and as DASH (separate video and audio), a page without
    /// a video. It records the `Referer` of each request.
    struct Site {
        base: String,
        yt_dlp: String,
        clip: Vec<u8>,
        referers: Referers,
        _folder: tempfile::TempDir,
    }

    /// The site, or None (having said why) when yt-dlp or ffmpeg is missing.
    async fn site(test: &str) -> Option<Site> {
        let Ok(yt_dlp) = std::env::var("YT_DLP_PATH") else {
            println!("skipping {test}: YT_DLP_PATH is not set");
            return None;
        };
        let ffmpeg = |arguments: &[&str]| {
            let mut command = tokio::process::Command::new("ffmpeg");
            command.args(["-v", "error", "-y"]).args(arguments.iter().copied());
            command
        };
        if !ffmpeg(&["-version"]).output().await.is_ok_and(|output| output.status.success()) {
            println!("skipping {test}: ffmpeg is not on the PATH");
            return None;
        }
        let folder = tempfile::tempdir().unwrap();
        let path = |name: &str| folder.path().join(name).to_str().unwrap().to_owned();
        std::fs::create_dir(path("hls")).unwrap();
        std::fs::create_dir(path("dash")).unwrap();
        let source = ["-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-f", "lavfi", "-i", "sine", "-t", "2"];
        let encoding = ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest"];
        let clip = path("clip.mp4");
        let hls = ["-i", &clip, "-c", "copy", "-f", "hls", "-hls_time", "1", "-hls_playlist_type", "vod"];
        let dash = ["-i", &clip, "-map", "0:v", "-map", "0:a", "-c", "copy", "-f", "dash", "-seg_duration", "1"];
        for arguments in [
            [&source[..], &encoding[..], &[clip.as_str()]].concat(),
            [&hls[..], &[path("hls/stream.m3u8").as_str()]].concat(),
            [&dash[..], &[path("dash/stream.mpd").as_str()]].concat(),
        ] {
            let output = ffmpeg(&arguments).output().await.unwrap();
            assert!(output.status.success(), "ffmpeg: {}", String::from_utf8_lossy(&output.stderr));
        }
        let page =
            |title: &str, body: &str| format!("<html><head><title>{title}</title></head><body>{body}</body></html>");
        std::fs::write(path("page.html"), page("Test clip", r#"<video src="/clip.mp4" controls></video>"#)).unwrap();
        std::fs::write(path("hls.html"), page("Test stream", r#"<video src="/hls/stream.m3u8" controls></video>"#))
            .unwrap();
        std::fs::write(path("empty.html"), page("Nothing here", "<p>No video.</p>")).unwrap();
        let referers = Arc::new(Mutex::new(Vec::new()));
        let base = serve_folder(folder.path().to_owned(), referers.clone()).await;
        Some(Site { base, yt_dlp, clip: std::fs::read(clip).unwrap(), referers, _folder: folder })
    }

    async fn serve_folder(folder: PathBuf, referers: Referers) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (folder, referers) = (folder.clone(), referers.clone());
                let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let name = request.uri().path().trim_start_matches('/').to_owned();
                    let referer = request.headers().get("referer").and_then(|value| value.to_str().ok());
                    referers.lock().unwrap().push((name.clone(), referer.map(str::to_owned)));
                    let file = (!name.contains("..")).then(|| std::fs::read(folder.join(&name)).ok()).flatten();
                    let content_type = match name.rsplit('.').next() {
                        Some("html") => "text/html; charset=utf-8",
                        Some("mp4") => "video/mp4",
                        Some("m3u8") => "application/vnd.apple.mpegurl",
                        Some("ts") => "video/mp2t",
                        Some("mpd") => "application/dash+xml",
                        _ => "application/octet-stream",
                    };
                    let response = match file {
                        Some(bytes) => hyper::Response::builder()
                            .header("content-type", content_type)
                            .body(http_body_util::Full::new(bytes::Bytes::from(bytes))),
                        None => hyper::Response::builder().status(404).body(http_body_util::Full::default()),
                    };
                    std::future::ready(Ok::<_, Infallible>(response.unwrap()))
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                tokio::spawn(connection);
            }
        });
        base
    }

    #[tokio::test]
    async fn a_page_with_a_video_tag_is_described_and_its_file_fetched_as_served() {
        let Some(site) = site("a_page_with_a_video_tag_is_described_and_its_file_fetched_as_served").await else {
            return;
        };
        let yt_dlp = YtDlp::new(&site.yt_dlp, true);
        let page = format!("{}/page.html", site.base);
        let video = yt_dlp.describe(&page).await.unwrap();
        assert_eq!(video.site, "generic");
        assert_eq!(video.video_id, "page-1");
        assert!(video.title.starts_with("Test clip"), "{video:?}");
        assert_eq!(video.page_url, page);
        let folder = tempfile::tempdir().unwrap();
        let output = folder.path().join("download");
        let size = yt_dlp.download(&page, &output, 10_000_000).await.unwrap();
        assert_eq!(size, site.clip.len() as u64);
        assert_eq!(std::fs::read(&output).unwrap(), site.clip);
        let referers = site.referers.lock().unwrap().clone();
        assert!(referers.contains(&("clip.mp4".into(), Some(page.clone()))), "{referers:?}");
        let message = refusal(yt_dlp.download(&page, &output, 1000).await);
        assert_eq!(message, "the file is larger than the limit of 1000 bytes");
        let message = refusal(YtDlp::new(&site.yt_dlp, false).describe(&page).await);
        assert!(message.contains("127.0.0.1") && message.contains("private"), "{message}");
    }

    #[tokio::test]
    async fn segmented_and_separate_streams_are_fetched_and_merged_by_yt_dlp() {
        let Some(site) = site("segmented_and_separate_streams_are_fetched_and_merged_by_yt_dlp").await else { return };
        let yt_dlp = YtDlp::new(&site.yt_dlp, true);
        let folder = tempfile::tempdir().unwrap();
        for (path, streams) in [("hls.html", "video,audio"), ("dash/stream.mpd", "video,audio")] {
            let output = folder.path().join("download");
            let url = format!("{}/{path}", site.base);
            let size = yt_dlp.download(&url, &output, 10_000_000).await.unwrap();
            assert_eq!(size, std::fs::metadata(&output).unwrap().len(), "{path}");
            let probe = tokio::process::Command::new("ffprobe")
                .args(["-v", "error", "-show_entries", "stream=codec_type", "-of", "csv=p=0"])
                .arg(&output)
                .output()
                .await
                .unwrap();
            let found: Vec<String> = String::from_utf8_lossy(&probe.stdout).lines().map(str::to_owned).collect();
            assert_eq!(found.join(","), streams, "{path}");
            let message = refusal(yt_dlp.download(&url, &output, 1000).await);
            assert_eq!(message, "the file is larger than the limit of 1000 bytes", "{path}");
        }
        // Only the downloads are left: yt-dlp's working folders are gone.
        assert_eq!(std::fs::read_dir(folder.path()).unwrap().count(), 1);
    }

    #[tokio::test]
    async fn pages_without_a_video_and_missing_pages_are_refused_with_yt_dlps_reason() {
        let Some(site) = site("pages_without_a_video_and_missing_pages_are_refused_with_yt_dlps_reason").await else {
            return;
        };
        let yt_dlp = YtDlp::new(&site.yt_dlp, true);
        let empty = format!("{}/empty.html", site.base);
        let message = refusal(yt_dlp.describe(&empty).await);
        assert_eq!(message, format!("the page at {empty} has no video yt-dlp can read: Unsupported URL: {empty}"));
        let missing = format!("{}/missing.html", site.base);
        let message = refusal(yt_dlp.describe(&missing).await);
        assert!(message.starts_with(&format!("the page at {missing} has no video yt-dlp can read: ")), "{message}");
        assert!(message.contains("HTTP Error 404"), "{message}");
        let folder = tempfile::tempdir().unwrap();
        let message = refusal(yt_dlp.download(&empty, &folder.path().join("download"), 1000).await);
        assert!(message.contains("Unsupported URL"), "{message}");
    }
}
