//! The generation providers a configuration chooses: the local ones by default, the
//! HTTP adapters (OpenAI, Gemini Veo) where a kind is set to use them. An HTTP adapter is
//! built when it is first used, with its key as configured: given, or read from the
//! deployment's Secrets Manager secret (a failure there fails that task saying why, and
//! the next task tries again).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;

use super::gemini::Veo;
use super::local_generation::LocalGenerator;
use super::openai::OpenAi;
use super::secrets::SecretsManager;
use crate::config::{GenerationSettings, ProviderAccess, ProviderChoice, ProviderKey};
use crate::domain::generation::{
    GenerationError, Generator, Generators, ImageRequest, SpeechRequest, Stop, VideoRequest,
};

/// The providers of `settings`, with ffmpeg at `ffmpeg` for the local ones and the
/// deployment's Secrets Manager for keys kept there.
pub fn generators(settings: &GenerationSettings, ffmpeg: &Path, secrets: Option<SecretsManager>) -> Generators {
    let local = LocalGenerator::new(ffmpeg, &settings.espeak, &settings.font);
    let mut generators = local.clone().providers();
    let openai = || Arc::new(BuiltOnFirstUse::new("openai", settings.openai.clone(), secrets.clone(), OpenAi::new));
    if settings.image == ProviderChoice::OpenAi {
        generators = generators.with::<ImageRequest>(openai());
    }
    if settings.speech == ProviderChoice::OpenAi {
        generators = generators.with::<SpeechRequest>(openai());
    }
    if settings.video == ProviderChoice::Gemini {
        let veo = Arc::new(BuiltOnFirstUse::new("gemini-veo", settings.gemini.clone(), secrets, Veo::new));
        generators = generators.with::<VideoRequest>(Arc::new(VeoModels { veo, others: Arc::new(local) }));
    }
    generators
}

/// Video of the veo models by the Gemini adapter, of the others by the local provider.
struct VeoModels {
    veo: Arc<dyn Generator<VideoRequest>>,
    others: Arc<dyn Generator<VideoRequest>>,
}

impl VeoModels {
    fn provider(&self, request: &VideoRequest) -> &dyn Generator<VideoRequest> {
        if request.model.starts_with("veo-") {
            self.veo.as_ref()
        } else {
            self.others.as_ref()
        }
    }
}

#[async_trait]
impl Generator<VideoRequest> for VeoModels {
    fn name(&self) -> &str {
        self.veo.name()
    }

    fn name_for(&self, request: &VideoRequest) -> &str {
        self.provider(request).name()
    }

    async fn generate(&self, request: &VideoRequest, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        self.provider(request).generate(request, output, stop).await
    }
}

/// An HTTP adapter built on first use from its address and key.
struct BuiltOnFirstUse<P> {
    name: &'static str,
    make: Box<dyn Fn() -> BoxFuture<'static, anyhow::Result<P>> + Send + Sync>,
    built: tokio::sync::OnceCell<P>,
}

impl<P: Send + Sync + 'static> BuiltOnFirstUse<P> {
    fn new(
        name: &'static str,
        access: Option<ProviderAccess>,
        secrets: Option<SecretsManager>,
        build: fn(&str, &str) -> anyhow::Result<P>,
    ) -> Self {
        let make = move || -> BoxFuture<'static, anyhow::Result<P>> {
            let (access, secrets) = (access.clone(), secrets.clone());
            Box::pin(async move {
                let Some(ProviderAccess { base_url, key }) = access else {
                    anyhow::bail!("its key is not configured");
                };
                let key = match key {
                    ProviderKey::Value(key) => key,
                    ProviderKey::Secret { secret, field } => {
                        let secrets = secrets.ok_or_else(|| {
                            anyhow::anyhow!("keys in Secrets Manager (PROVIDER_KEYS_SECRET) need the AWS backend")
                        })?;
                        secrets.field(&secret, field).await?
                    }
                };
                build(&base_url, &key)
            })
        };
        Self { name, make: Box::new(make), built: tokio::sync::OnceCell::new() }
    }

    /// The adapter, built now if it was not.
    async fn provider(&self) -> Result<&P, GenerationError> {
        self.built.get_or_try_init(|| (self.make)()).await.map_err(|error| {
            GenerationError::Unavailable(anyhow::anyhow!("the {} provider could not be set up: {error:#}", self.name))
        })
    }
}

#[async_trait]
impl<R: Sync + 'static, P: Generator<R> + 'static> Generator<R> for BuiltOnFirstUse<P> {
    fn name(&self) -> &str {
        self.name
    }

    async fn generate(&self, request: &R, output: &Path, stop: &Stop) -> Result<(), GenerationError> {
        self.provider().await?.generate(request, output, stop).await
    }
}
