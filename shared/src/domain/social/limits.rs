//! The platforms' published limits on what a post carries (docs/guide/social.md has the table):
//! description length, a video's length and size, a picture's size, and the aspect ratio
//! (width / height) of every medium. A post is refused at creation when any medium
//! breaks a limit of any of its destinations, naming the medium, the platform and the
//! limit.

use super::{Platform, PostMedium};

/// One platform's limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlatformLimits {
    pub description_chars: usize,
    pub min_video_ms: u64,
    pub max_video_ms: u64,
    pub max_video_bytes: u64,
    /// None: the platform takes no pictures through this service.
    pub max_image_bytes: Option<u64>,
    /// Narrowest and widest width / height.
    pub min_aspect: f64,
    pub max_aspect: f64,
}

const MB: u64 = 1024 * 1024;
const GB: u64 = 1024 * MB;

/// The limits of `platform`.
pub fn of(platform: Platform) -> PlatformLimits {
    match platform {
        // X: videos of 0.5 s to 140 s, 512 MB; pictures of 5 MB; 1:3 to 3:1; 280 characters.
        Platform::X => PlatformLimits {
            description_chars: 280,
            min_video_ms: 500,
            max_video_ms: 140_000,
            max_video_bytes: 512 * MB,
            max_image_bytes: Some(5 * MB),
            min_aspect: 1.0 / 3.0,
            max_aspect: 3.0,
        },
        // LinkedIn: videos of 3 s to 30 min, 500 MB; pictures of 36 MB; 1:2.4 to 2.4:1.
        Platform::Linkedin => PlatformLimits {
            description_chars: 3_000,
            min_video_ms: 3_000,
            max_video_ms: 30 * 60_000,
            max_video_bytes: 500 * MB,
            max_image_bytes: Some(36 * MB),
            min_aspect: 1.0 / 2.4,
            max_aspect: 2.4,
        },
        // Instagram (Reels and feed): videos of 3 s to 15 min, 300 MB; pictures of 8 MB;
        // 4:5 to 1.91:1 for pictures, 0.01:1 to 10:1 for Reels (the wider range here,
        // pictures are checked against the narrower one below).
        Platform::Instagram => PlatformLimits {
            description_chars: 2_200,
            min_video_ms: 3_000,
            max_video_ms: 15 * 60_000,
            max_video_bytes: 300 * MB,
            max_image_bytes: Some(8 * MB),
            min_aspect: 0.01,
            max_aspect: 10.0,
        },
        // Facebook pages: videos of 1 s to 240 min, 10 GB; pictures of 10 MB; 9:16 to 16:9.
        Platform::Facebook => PlatformLimits {
            description_chars: 5_000,
            min_video_ms: 1_000,
            max_video_ms: 240 * 60_000,
            max_video_bytes: 10 * GB,
            max_image_bytes: Some(10 * MB),
            min_aspect: 9.0 / 16.0,
            max_aspect: 16.0 / 9.0,
        },
        // TikTok (Content Posting API): videos of 3 s to 10 min, 4 GB; photos of 20 MB;
        // 9:16 to 16:9.
        Platform::Tiktok => PlatformLimits {
            description_chars: 2_200,
            min_video_ms: 3_000,
            max_video_ms: 10 * 60_000,
            max_video_bytes: 4 * GB,
            max_image_bytes: Some(20 * MB),
            min_aspect: 9.0 / 16.0,
            max_aspect: 16.0 / 9.0,
        },
        // YouTube (videos.insert): up to 12 hours and 256 GB, any shape; no pictures; the
        // description is at most 5,000 bytes, without < or > (checked at create).
        Platform::Youtube => PlatformLimits {
            description_chars: 5_000,
            min_video_ms: 1,
            max_video_ms: 12 * 3_600_000,
            max_video_bytes: 256 * GB,
            max_image_bytes: None,
            min_aspect: 0.0,
            max_aspect: f64::INFINITY,
        },
    }
}

/// Instagram's pictures: 4:5 to 1.91:1.
const INSTAGRAM_IMAGE_ASPECT: (f64, f64) = (0.8, 1.91);

/// Why `medium` (named `field`) cannot go to `platform`, if it cannot.
pub fn check_medium(platform: Platform, medium: &PostMedium, field: &str) -> Result<(), String> {
    let limits = of(platform);
    let name = platform.as_str();
    let mb = |bytes: u64| bytes as f64 / MB as f64;
    match medium.duration_ms {
        Some(ms) => {
            if ms < limits.min_video_ms || ms > limits.max_video_ms {
                return Err(format!(
                    "{field}: the video is {:.1} s long; {name} takes videos of {} to {} s",
                    ms as f64 / 1000.0,
                    limits.min_video_ms as f64 / 1000.0,
                    limits.max_video_ms / 1000
                ));
            }
            if medium.bytes > limits.max_video_bytes {
                return Err(format!(
                    "{field}: the video is {:.1} MB; {name} takes videos of at most {:.0} MB",
                    mb(medium.bytes),
                    mb(limits.max_video_bytes)
                ));
            }
        }
        None => match limits.max_image_bytes {
            None => return Err(format!("{field}: {name} takes videos only, and this is a picture")),
            Some(max) if medium.bytes > max => {
                return Err(format!(
                    "{field}: the picture is {:.1} MB; {name} takes pictures of at most {:.0} MB",
                    mb(medium.bytes),
                    mb(max)
                ))
            }
            Some(_) => {}
        },
    }
    let (min, max) = match (platform, medium.duration_ms) {
        (Platform::Instagram, None) => INSTAGRAM_IMAGE_ASPECT,
        _ => (limits.min_aspect, limits.max_aspect),
    };
    let aspect = f64::from(medium.width) / f64::from(medium.height.max(1));
    if aspect < min - 1e-9 || aspect > max + 1e-9 {
        return Err(format!(
            "{field}: the medium is {}×{} (aspect ratio {aspect:.2}); {name} takes aspect ratios of {min:.2} to {max:.2}",
            medium.width, medium.height
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn video(ms: u64, width: u32, height: u32) -> PostMedium {
        PostMedium {
            key: "k".into(),
            version: None,
            content_type: "video/mp4".into(),
            bytes: 1_000,
            duration_ms: Some(ms),
            width,
            height,
        }
    }

    #[test]
    fn each_limit_names_the_medium_the_platform_and_the_range() {
        assert!(check_medium(Platform::X, &video(5_000, 320, 240), "media_urls[0]").is_ok());
        let long = check_medium(Platform::X, &video(150_000, 320, 240), "media_urls[0]").unwrap_err();
        assert!(long.contains("media_urls[0]: the video is 150.0 s long; x takes videos of 0.5 to 140 s"), "{long}");
        let short = check_medium(Platform::Tiktok, &video(2_000, 320, 240), "media_urls[1]").unwrap_err();
        assert!(short.contains("tiktok takes videos of 3 to 600 s"), "{short}");
        let wide = check_medium(Platform::X, &video(5_000, 320, 80), "media_urls[0]").unwrap_err();
        assert!(wide.contains("aspect ratio 4.00"), "{wide}");
        let picture = PostMedium { duration_ms: None, content_type: "image/png".into(), ..video(0, 320, 240) };
        assert!(check_medium(Platform::Youtube, &picture, "media_urls[0]").unwrap_err().contains("videos only"));
        let big = PostMedium { bytes: 6 * MB, ..picture };
        assert!(check_medium(Platform::X, &big, "media_urls[0]").unwrap_err().contains("at most 5 MB"));
    }
}
