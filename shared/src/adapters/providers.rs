//! The generation providers a configuration chooses: the local ones by default, the
//! HTTP adapters (OpenAI, Gemini Veo) where a kind is set to use them.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use super::gemini::Veo;
use super::local_generation::LocalGenerator;
use super::openai::OpenAi;
use crate::config::{GenerationSettings, ProviderAccess, ProviderChoice};
use crate::domain::generation::{
    GenerationError, Generators, ImageGenerator, ImageRequest, SpeechGenerator, SpeechRequest, Stop, VideoGenerator,
    VideoRequest,
};

/// The providers of `settings`, with ffmpeg at `ffmpeg` for the local ones.
pub fn generators(settings: &GenerationSettings, ffmpeg: &Path) -> Generators {
    let local = Arc::new(LocalGenerator::new(ffmpeg, &settings.espeak, &settings.font));
    let openai = |access: &Option<ProviderAccess>| -> Arc<Unbuilt<OpenAi>> {
        Arc::new(match access {
            Some(access) => Unbuilt::from(OpenAi::new(&access.base_url, &access.api_key), "openai"),
            None => Unbuilt::Failed { name: "openai", error: "OPENAI_API_KEY is not set".into() },
        })
    };
    let image: Arc<dyn ImageGenerator> = match settings.image {
        ProviderChoice::OpenAi => openai(&settings.openai),
        _ => local.clone(),
    };
    let speech: Arc<dyn SpeechGenerator> = match settings.speech {
        ProviderChoice::OpenAi => openai(&settings.openai),
        _ => local.clone(),
    };
    let veo: Option<Arc<dyn VideoGenerator>> = match (settings.video, &settings.gemini) {
        (ProviderChoice::Gemini, Some(access)) => {
            Some(Arc::new(Unbuilt::from(Veo::new(&access.base_url, &access.api_key), "gemini-veo")))
        }
        (ProviderChoice::Gemini, None) => {
            Some(Arc::new(Unbuilt::<Veo>::Failed { name: "gemini-veo", error: "GEMINI_API_KEY is not set".into() }))
        }
        _ => None,
    };
    Generators { image, video: local.clone(), veo, audio: local.clone(), speech, avatar: local }
}

/// An HTTP adapter, or why it could not be built (every generation then fails saying so).
enum Unbuilt<P> {
    Built(P),
    Failed { name: &'static str, error: String },
}

impl<P> Unbuilt<P> {
    fn from(built: anyhow::Result<P>, name: &'static str) -> Self {
        match built {
            Ok(provider) => Self::Built(provider),
            Err(error) => Self::Failed { name, error: format!("{error:#}") },
        }
    }

    fn unavailable(name: &str, error: &str) -> GenerationError {
        GenerationError::Unavailable(anyhow::anyhow!("the {name} provider could not be set up: {error}"))
    }
}

#[async_trait]
impl<P: ImageGenerator> ImageGenerator for Unbuilt<P> {
    fn name(&self) -> &str {
        match self {
            Self::Built(provider) => provider.name(),
            Self::Failed { name, .. } => name,
        }
    }

    async fn generate(&self, request: &ImageRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        match self {
            Self::Built(provider) => provider.generate(request, output, stop).await,
            Self::Failed { name, error } => Err(Self::unavailable(name, error)),
        }
    }
}

#[async_trait]
impl<P: SpeechGenerator> SpeechGenerator for Unbuilt<P> {
    fn name(&self) -> &str {
        match self {
            Self::Built(provider) => provider.name(),
            Self::Failed { name, .. } => name,
        }
    }

    async fn generate(&self, request: &SpeechRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        match self {
            Self::Built(provider) => provider.generate(request, output, stop).await,
            Self::Failed { name, error } => Err(Self::unavailable(name, error)),
        }
    }
}

#[async_trait]
impl<P: VideoGenerator> VideoGenerator for Unbuilt<P> {
    fn name(&self) -> &str {
        match self {
            Self::Built(provider) => provider.name(),
            Self::Failed { name, .. } => name,
        }
    }

    async fn generate(&self, request: &VideoRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        match self {
            Self::Built(provider) => provider.generate(request, output, stop).await,
            Self::Failed { name, error } => Err(Self::unavailable(name, error)),
        }
    }
}
