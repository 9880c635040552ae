//! Generation: what a generation tile asks a provider for, and the provider port
//! ([`Generator`]), one provider per kind of request (image, video, music and effects,
//! speech, avatar), found by the request's type ([`Generators::of`]). A provider writes
//! the file it makes to the path it is given; the worker probes and stores it like any
//! render. Local providers (ffmpeg, espeak-ng) are the default; HTTP adapters (OpenAI,
//! Gemini) are chosen by configuration.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

/// An image to make: a PNG of `width`×`height`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRequest {
    pub prompt: String,
    pub width: u32,
    pub height: u32,
    /// `low`, `medium` or `high`.
    pub quality: String,
}

/// A video clip to make: an H.264/AAC MP4 of `width`×`height` lasting `duration_s`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VideoRequest {
    pub prompt: String,
    /// The tile's model (`veo-3`, `veo-3-fast`, `kling-2.1`, `kling-2.1-pro`).
    pub model: String,
    /// The tile's resolution name (`480p`, `720p`, `1080p`, `4k`).
    pub resolution: String,
    /// `16:9`, `9:16` or `1:1`.
    pub aspect_ratio: String,
    pub width: u32,
    pub height: u32,
    pub duration_s: u32,
}

/// What kind of sound an audio generation makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AudioMode {
    Music,
    SoundEffect,
}

/// A sound to make: an AAC `.m4a` lasting `length_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AudioRequest {
    pub mode: AudioMode,
    pub prompt: String,
    pub length_ms: u64,
}

/// Speech to make: a WAV file of `text` spoken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpeechRequest {
    pub text: String,
}

/// The reference an avatar is made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AvatarReference {
    /// A video of the person (looped or cut to the speech).
    Video { location: String },
    /// A picture of the person.
    Image { location: String },
}

/// An avatar video to make: the reference carrying the spoken script (a WAV file made by
/// the speech provider), as long as the speech.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvatarRequest {
    pub reference: AvatarReference,
    /// Where the speech is (a local file).
    pub speech: std::path::PathBuf,
    pub speech_ms: u64,
    /// `standard` or `expressive`.
    pub video_model: String,
    /// The size of the video (the reference's, even, at most 1080 on its long side).
    pub width: u32,
    pub height: u32,
}

/// When a provider's work must stop: its run was cancelled, or its task's time is up.
#[derive(Clone, Debug)]
pub struct Stop {
    pub cancelled: tokio::sync::watch::Receiver<bool>,
    pub deadline: tokio::time::Instant,
}

impl Stop {
    /// Time left before the deadline.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(tokio::time::Instant::now())
    }
}

/// Why a generation failed.
#[derive(Debug, thiserror::Error)]
pub enum GenerationError {
    /// The provider refused or failed; the message is the provider's own.
    #[error("{provider}: {message}")]
    Provider { provider: String, message: String },
    /// The provider did not finish within the task's time.
    #[error("{provider} did not finish within the task's time limit of {limit:?}")]
    TimedOut { provider: String, limit: Duration },
    /// Stopped because the run was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// The provider could not be reached or run at all (the task fails saying so; a
    /// resume of the run tries again).
    #[error("generation provider unavailable: {0:#}")]
    Unavailable(anyhow::Error),
}

/// A provider of one kind of media, asked by its request type `R` ([`ImageRequest`]:
/// a PNG; [`VideoRequest`]: an MP4; [`AudioRequest`]: an `.m4a`; [`SpeechRequest`]: a
/// WAV; [`AvatarRequest`]: an MP4).
#[async_trait]
pub trait Generator<R: Sync>: Send + Sync {
    /// The provider's name, cited in `sources`.
    fn name(&self) -> &str;
    /// The name of the provider that makes `request`: its own, unless it hands requests
    /// to others by what they ask for.
    fn name_for(&self, _request: &R) -> &str {
        self.name()
    }
    /// Writes the file `request` asks for to `output`.
    async fn generate(&self, request: &R, output: &Path, stop: &Stop) -> Result<(), GenerationError>;
}

/// The provider of each kind of request, by the request's type: a new kind adds its
/// provider with [`Generators::with`], and nothing here changes.
#[derive(Clone, Default)]
pub struct Generators {
    /// An `Arc<dyn Generator<R>>` under `TypeId::of::<R>()`.
    providers: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl Generators {
    /// These providers, with `provider` making the requests of type `R` (in place of the
    /// one that made them).
    pub fn with<R: Sync + 'static>(mut self, provider: Arc<dyn Generator<R>>) -> Self {
        self.providers.insert(TypeId::of::<R>(), Arc::new(provider));
        self
    }

    /// The provider of requests of type `R`.
    pub fn of<R: Sync + 'static>(&self) -> Result<&Arc<dyn Generator<R>>, GenerationError> {
        let provider = self.providers.get(&TypeId::of::<R>());
        provider.and_then(|provider| provider.downcast_ref::<Arc<dyn Generator<R>>>()).ok_or_else(|| {
            GenerationError::Unavailable(anyhow::anyhow!(
                "no provider is configured for {}",
                std::any::type_name::<R>().rsplit("::").next().unwrap_or_default()
            ))
        })
    }

    /// Asks the provider of `R` for `request`: the name it is cited by, and what it did.
    pub async fn generate<R: Sync + 'static>(
        &self,
        request: &R,
        output: &Path,
        stop: &Stop,
    ) -> (String, Result<(), GenerationError>) {
        match self.of::<R>() {
            Ok(provider) => (provider.name_for(request).to_owned(), provider.generate(request, output, stop).await),
            Err(error) => (String::new(), Err(error)),
        }
    }
}

/// The size of a video: `resolution` names the short side (`4k` is 3840 on the long
/// side), `aspect_ratio` the shape; both even.
pub fn video_size(resolution: &str, aspect_ratio: &str) -> (u32, u32) {
    let (long_over_short, portrait) = match aspect_ratio {
        "9:16" => (16.0 / 9.0, true),
        "1:1" => (1.0, false),
        _ => (16.0 / 9.0, false),
    };
    let even = |value: f64| ((value / 2.0).round() as u32) * 2;
    let (long, short) = match resolution {
        "4k" => (3840, even(3840.0 / long_over_short)),
        name => {
            let short: u32 = match name {
                "480p" => 480,
                "720p" => 720,
                _ => 1080,
            };
            (even(f64::from(short) * long_over_short), short)
        }
    };
    if portrait {
        (short, long)
    } else {
        (long, short)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str);

    #[async_trait]
    impl Generator<ImageRequest> for Named {
        fn name(&self) -> &str {
            self.0
        }
        async fn generate(&self, _: &ImageRequest, _: &Path, _: &Stop) -> Result<(), GenerationError> {
            Ok(())
        }
    }

    #[test]
    fn a_kind_is_made_by_the_provider_last_given_for_its_request_type() {
        let generators = Generators::default().with::<ImageRequest>(Arc::new(Named("local")));
        assert_eq!(generators.of::<ImageRequest>().unwrap().name(), "local");
        let generators = generators.with::<ImageRequest>(Arc::new(Named("openai")));
        assert_eq!(generators.of::<ImageRequest>().unwrap().name(), "openai");
        let missing = generators.of::<SpeechRequest>().err().unwrap().to_string();
        assert!(missing.contains("no provider is configured for SpeechRequest"), "{missing}");
    }

    #[test]
    fn resolution_names_the_short_side_and_4k_the_long_one() {
        assert_eq!(video_size("1080p", "16:9"), (1920, 1080));
        assert_eq!(video_size("1080p", "9:16"), (1080, 1920));
        assert_eq!(video_size("1080p", "1:1"), (1080, 1080));
        assert_eq!(video_size("720p", "16:9"), (1280, 720));
        assert_eq!(video_size("480p", "16:9"), (854, 480));
        assert_eq!(video_size("4k", "16:9"), (3840, 2160));
        assert_eq!(video_size("4k", "9:16"), (2160, 3840));
        assert_eq!(video_size("4k", "1:1"), (3840, 3840));
    }
}
