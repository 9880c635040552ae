//! A Channel Feed's entries: an Atom or RSS 2.0 document read with feed-rs, each entry
//! reduced to what a run and its `triggered_by` need.

use sha2::{Digest, Sha256};

use crate::domain::time::Timestamp;

/// Entries of one feed looked at per poll, the newest (a channel's feed lists its latest 15).
pub const MAX_ENTRIES: usize = 200;
/// Longest text kept of what a feed says (its strings are not ours to bound).
const MAX_TEXT_CHARS: usize = 500;
/// Longest link kept; a longer one is not a link a run can read.
const MAX_LINK_CHARS: usize = 2_048;

/// One entry of a feed.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Identifies the entry among the feed's entries for good: a digest of its ID.
    pub key: String,
    /// YouTube's `yt:videoId`, else the entry's ID.
    pub video_id: String,
    pub title: String,
    /// The entry's link (None: the entry has none, and no run can read it).
    pub link: Option<String>,
    /// When it was published (else updated), if the feed says.
    pub published: Option<Timestamp>,
}

/// A parsed feed.
#[derive(Clone, Debug, PartialEq)]
pub struct Feed {
    /// YouTube's `yt:channelId`, else the feed's ID.
    pub channel_id: String,
    /// Newest first as the feed lists them, at most [`MAX_ENTRIES`].
    pub entries: Vec<Entry>,
}

/// Parses an Atom or RSS 2.0 document; Err says why it is not one.
pub fn parse(bytes: &[u8]) -> Result<Feed, String> {
    let parsed =
        feed_rs::parser::parse(bytes).map_err(|error| format!("the feed is not valid Atom or RSS: {error}"))?;
    if matches!(parsed.feed_type, feed_rs::model::FeedType::JSON) {
        return Err("the feed is JSON Feed; an Atom or RSS 2.0 feed is expected".into());
    }
    let channel_id = youtube_channel(bytes)
        .or_else(|| parsed.id.strip_prefix("yt:channel:").map(str::to_owned))
        .unwrap_or_else(|| parsed.id.clone());
    // The newest entries when the feed has more than are looked at (an RSS feed may list
    // its oldest first); undated ones after the dated, in the feed's order.
    let mut entries = parsed.entries;
    entries.sort_by_key(|entry| std::cmp::Reverse(entry.published.or(entry.updated)));
    let entries = entries
        .into_iter()
        .take(MAX_ENTRIES)
        .map(|entry| {
            let video_id = entry.id.strip_prefix("yt:video:").unwrap_or(&entry.id).to_owned();
            let link = entry
                .links
                .iter()
                .find(|link| link.rel.as_deref().is_none_or(|rel| rel == "alternate"))
                .or(entry.links.first())
                .map(|link| link.href.trim().to_owned())
                .filter(|href| !href.is_empty() && href.chars().count() <= MAX_LINK_CHARS);
            Entry {
                key: hex::encode(Sha256::digest(entry.id.as_bytes())),
                video_id: bounded(&video_id),
                title: bounded(entry.title.map(|title| title.content).as_deref().unwrap_or_default()),
                link,
                published: entry.published.or(entry.updated).map(Timestamp::from_datetime),
            }
        })
        .collect();
    Ok(Feed { channel_id: bounded(&channel_id), entries })
}

fn bounded(text: &str) -> String {
    text.trim().chars().take(MAX_TEXT_CHARS).collect()
}

/// The `<yt:channelId>` of a YouTube channel's feed (feed-rs keeps no extension element).
fn youtube_channel(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let start = text.find("<yt:channelId>")? + "<yt:channelId>".len();
    let length = text[start..].find("</yt:channelId>")?;
    Some(text[start..start + length].trim().to_owned()).filter(|id| !id.is_empty() && id.len() <= 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    const YOUTUBE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns:yt="http://www.youtube.com/xml/schemas/2015" xmlns:media="http://search.yahoo.com/mrss/" xmlns="http://www.w3.org/2005/Atom">
 <id>yt:channel:UCabc</id>
 <yt:channelId>UCabc</yt:channelId>
 <title>A channel</title>
 <entry>
  <id>yt:video:vid123</id>
  <yt:videoId>vid123</yt:videoId>
  <yt:channelId>UCabc</yt:channelId>
  <title>Launch day</title>
  <link rel="alternate" href="https://www.youtube.com/watch?v=vid123"/>
  <published>2026-05-01T10:00:00+00:00</published>
  <updated>2026-05-02T10:00:00+00:00</updated>
 </entry>
</feed>"#;

    const RSS: &str = r#"<?xml version="1.0"?>
<rss version="2.0"><channel><title>Blog</title><link>https://example.com/</link>
 <item><title>Second</title><link>https://example.com/2.mp4</link><guid>post-2</guid><pubDate>Sat, 02 May 2026 08:00:00 GMT</pubDate></item>
 <item><title>Undated</title><link>https://example.com/1.mp4</link><guid>post-1</guid></item>
</channel></rss>"#;

    #[test]
    fn a_youtube_feed_names_its_channel_and_videos() {
        let feed = parse(YOUTUBE.as_bytes()).unwrap();
        assert_eq!(feed.channel_id, "UCabc");
        let entry = &feed.entries[0];
        assert_eq!(entry.video_id, "vid123");
        assert_eq!(entry.title, "Launch day");
        assert_eq!(entry.link.as_deref(), Some("https://www.youtube.com/watch?v=vid123"));
        assert_eq!(entry.published.unwrap().to_string(), "2026-05-01T10:00:00.000Z");
    }

    #[test]
    fn an_rss_feed_has_ids_links_and_optional_dates() {
        let feed = parse(RSS.as_bytes()).unwrap();
        assert_eq!(feed.entries.len(), 2);
        assert_eq!(feed.entries[0].video_id, "post-2");
        assert_eq!(feed.entries[0].published.unwrap().to_string(), "2026-05-02T08:00:00.000Z");
        assert_eq!(feed.entries[1].published, None);
        assert_eq!(feed.entries[1].link.as_deref(), Some("https://example.com/1.mp4"));
        assert_ne!(feed.entries[0].key, feed.entries[1].key);
        assert_eq!(parse(RSS.as_bytes()).unwrap().entries[0].key, feed.entries[0].key, "keys are stable");
    }

    #[test]
    fn what_is_not_a_feed_is_refused() {
        for text in ["<html><body>hi</body></html>", "not xml at all", "<feed><entry>"] {
            assert!(parse(text.as_bytes()).is_err(), "{text}");
        }
    }
}
