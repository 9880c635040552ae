//! Video-sharing sites: which input URLs are theirs (read with yt-dlp rather than
//! downloaded as files), and what a run records of a site's video.

use async_trait::async_trait;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::domain::media::ports::DownloadError;

/// Hosts (and their subdomains) whose `video_urls` are pages of a video-sharing site.
pub const KNOWN_SITE_HOSTS: &[&str] = &[
    "youtube.com",
    "youtu.be",
    "youtube-nocookie.com",
    "vimeo.com",
    "dailymotion.com",
    "dai.ly",
    "tiktok.com",
    "twitch.tv",
    "x.com",
    "twitter.com",
    "facebook.com",
    "fb.watch",
    "instagram.com",
    "reddit.com",
    "streamable.com",
    "rumble.com",
    "bilibili.com",
    "loom.com",
];

/// The sites a deployment reads videos from, and the reader.
#[derive(Clone)]
pub struct Sites {
    pub videos: Arc<dyn SiteVideos>,
    /// [`KNOWN_SITE_HOSTS`] and those the deployment adds (`VIDEO_SITE_HOSTS`).
    pub hosts: Vec<String>,
}

impl Sites {
    /// The known sites and `extra` hosts, read with `videos`.
    pub fn new(videos: Arc<dyn SiteVideos>, extra: &[String]) -> Self {
        let mut hosts: Vec<String> = KNOWN_SITE_HOSTS.iter().map(|host| (*host).to_owned()).collect();
        hosts.extend(extra.iter().map(|host| host.trim().trim_end_matches('.').to_ascii_lowercase()));
        Self { videos, hosts }
    }

    /// Whether `url` is a page of one of the sites.
    pub fn is_site(&self, url: &str) -> bool {
        let Some(host) = url::Url::parse(url).ok().and_then(|url| url.host_str().map(str::to_ascii_lowercase)) else {
            return false;
        };
        self.hosts.iter().any(|site| host == *site || host.ends_with(&format!(".{site}")))
    }
}

/// What a run keeps of a site's video.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteVideoInfo {
    pub site: String,
    pub video_id: String,
    pub title: String,
    pub page_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// Longest text kept of what a site says (its strings are not ours to bound).
pub const MAX_SITE_TEXT_CHARS: usize = 500;

impl From<SiteVideo> for SiteVideoInfo {
    fn from(video: SiteVideo) -> Self {
        let bounded = |text: String| text.chars().take(MAX_SITE_TEXT_CHARS).collect::<String>();
        Self {
            site: bounded(video.site),
            video_id: bounded(video.video_id),
            title: bounded(video.title),
            // A page URL is at most 2,048 characters when given; a site's own may be longer.
            page_url: video.page_url.chars().take(crate::core::ssrf::MAX_URL_CHARS).collect(),
            channel_id: video.channel_id.map(bounded),
            duration_ms: video.duration_ms,
        }
    }
}

/// What a video-sharing site says of one of its videos.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteVideo {
    /// The site, as a short lower-case name (`youtube`, `vimeo`; `generic` for a page
    /// that merely embeds a video file).
    pub site: String,
    /// The site's ID of the video.
    pub video_id: String,
    pub title: String,
    /// The video's page, as the site names it.
    pub page_url: String,
    /// The channel (or uploader) that published it, when the site says.
    pub channel_id: Option<String>,
    /// The video's length, when the site says.
    pub duration_ms: Option<u64>,
}

/// Reads and fetches videos of video-sharing sites (yt-dlp).
#[async_trait]
pub trait SiteVideos: Send + Sync {
    /// What the site says of the video at `url`, without fetching the media;
    /// `DownloadError::Refused` when the page cannot be read or has no video.
    async fn describe(&self, url: &str) -> Result<SiteVideo, DownloadError>;
    /// Fetches the video at `url` into the file `output`, refusing more than
    /// `max_bytes`; returns the size.
    async fn download(&self, url: &str, output: &std::path::Path, max_bytes: u64) -> Result<u64, DownloadError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::media::ports::DownloadError;

    struct Nothing;

    #[async_trait::async_trait]
    impl SiteVideos for Nothing {
        async fn describe(&self, _: &str) -> Result<SiteVideo, DownloadError> {
            Err(DownloadError::Refused("none".into()))
        }
        async fn download(&self, _: &str, _: &std::path::Path, _: u64) -> Result<u64, DownloadError> {
            Err(DownloadError::Refused("none".into()))
        }
    }

    #[test]
    fn site_pages_are_known_hosts_and_their_subdomains_and_the_added_ones() {
        let sites = Sites::new(Arc::new(Nothing), &["Videos.Example.org".into()]);
        for site in [
            "https://www.youtube.com/watch?v=x",
            "https://youtu.be/x",
            "https://m.youtube.com/watch?v=x",
            "https://vimeo.com/1",
            "http://videos.example.org/page",
        ] {
            assert!(sites.is_site(site), "{site}");
        }
        for file in ["https://cdn.example.com/a.mp4", "https://notyoutube.com/x", "https://youtube.com.evil.io/x"] {
            assert!(!sites.is_site(file), "{file}");
        }
    }
}
