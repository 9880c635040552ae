//! Settings read once from the environment at cold start.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::domain::webhooks::WebhookSchedule;

/// Table name used when `TABLE_NAME` is not set.
pub const DEFAULT_TABLE_NAME: &str = "video-workflow";
/// Bucket used when `MEDIA_BUCKET` is not set (local runs against the emulator).
pub const DEFAULT_MEDIA_BUCKET: &str = "video-workflow-media";

/// Default time budget of one node task's media work.
pub const DEFAULT_TASK_BUDGET: Duration = Duration::from_secs(15 * 60);

/// How a process runs its media work and treats callers: the same on every backend,
/// with every default in one place ([`Settings::default`]).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The ffmpeg program (on Lambda, from a layer: `/opt/bin/ffmpeg`).
    pub ffmpeg: PathBuf,
    /// The ffprobe program (on Lambda, from the same layer).
    pub ffprobe: PathBuf,
    /// The yt-dlp program (video-sharing sites' videos; on Lambda, from the same layer).
    pub yt_dlp: PathBuf,
    /// Folder for tasks' scratch files.
    pub scratch: PathBuf,
    /// Longest one node task's media work may take.
    pub task_budget: Duration,
    /// An edit whose output is longer is rendered in segments of this length, in
    /// parallel, and joined (`SEGMENT_SECONDS`, `serve --segment-seconds`; 0: never).
    pub segment: Option<Duration>,
    /// How long a task's claim holds beyond its budget (storing its files, recording
    /// its result); a message that meets a live claim comes back after it.
    pub claim_margin: Duration,
    /// When webhook deliveries are retried and how long receivers have to answer.
    pub webhook_schedule: WebhookSchedule,
    /// Hosts whose `video_urls` are video-sharing sites' pages, beyond the known ones.
    pub video_site_hosts: Vec<String>,
    /// How long a verified API key is trusted without reading it again.
    pub auth_cache_ttl: Duration,
    /// Whether URL inputs and callbacks may reach loopback and private addresses (a
    /// local `serve`; functions run on this machine by the tests, `ALLOW_PRIVATE_URLS`,
    /// which the template never sets).
    pub allow_private_urls: bool,
    /// How long an `Idempotency-Key` claim holds without renewal (a running request
    /// renews it every third of this).
    pub idempotency_lease: Duration,
    /// When the sweeper takes a message or a claim as lost.
    pub sweep: crate::domain::runs::sweep::SweepSettings,
    /// Which provider makes each kind of generated media, and the local tools.
    pub generation: GenerationSettings,
    /// How long a task waiting for an avatar profile's processing (`blocked`) waits
    /// before it looks again.
    pub blocked_retry: Duration,
    /// Which prices tasks pay (`CREDIT_PRICES`: `catalog`, the default, or `free`).
    pub prices: crate::domain::runs::charges::Prices,
    /// How long a task blocked for credits waits for an auto top-up to be paid
    /// (`TOP_UP_WAIT_SECONDS`, default 600) before it waits for a resume instead.
    pub top_up_wait: Duration,
    /// Where plans and credits are paid for.
    pub billing: BillingSettings,
    /// The address of YouTube's Data API (`YOUTUBE_API_URL`; tests point it at a local
    /// server that follows the published formats).
    pub youtube_api_url: String,
    /// Google's OAuth token endpoint, where an expired YouTube access token is refreshed
    /// (`YOUTUBE_TOKEN_URL`; tests point it at a local server).
    pub youtube_token_url: String,
    /// Where connections' credentials are kept on AWS: the name prefix of their secrets
    /// in Secrets Manager (`SOCIAL_SECRET_PREFIX`, default `video-workflow/social`).
    pub social_secret_prefix: String,
}

/// YouTube's Data API.
pub const YOUTUBE_API_URL: &str = "https://www.googleapis.com";
/// Google's OAuth 2.0 token endpoint.
pub const YOUTUBE_TOKEN_URL: &str = "https://oauth2.googleapis.com/token";

/// Who makes a kind of generated media.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProviderChoice {
    /// On this machine (ffmpeg, espeak-ng): the default.
    #[default]
    Local,
    /// OpenAI's (or a compatible server's) API.
    OpenAi,
    /// Google's Gemini API (Veo).
    Gemini,
}

/// An HTTP provider's address and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderAccess {
    pub base_url: String,
    pub key: ProviderKey,
}

/// Where a provider's API key is: given (a local `serve`), or a field of a JSON secret
/// in Secrets Manager (a deployment), read when the provider is first used.
#[derive(Clone, PartialEq, Eq)]
pub enum ProviderKey {
    Value(String),
    Secret { secret: String, field: &'static str },
}

impl std::fmt::Debug for ProviderKey {
    /// Never the key itself.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Value(_) => f.write_str("Value(<hidden>)"),
            Self::Secret { secret, field } => write!(f, "Secret({secret}, {field})"),
        }
    }
}

/// Where plans and credits are paid for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BillingSettings {
    /// The local sandbox: checkouts are pages `serve` answers; top-ups are paid at once.
    #[default]
    Sandbox,
    Stripe(StripeSettings),
}

/// Stripe's address and keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeSettings {
    pub base_url: String,
    /// The secret API key (`sk_…`).
    pub api_key: ProviderKey,
    /// The webhook endpoint's signing secret (`whsec_…`).
    pub webhook_secret: ProviderKey,
}

/// Default address of Stripe's API.
pub const STRIPE_BASE_URL: &str = "https://api.stripe.com";

impl BillingSettings {
    /// Reads `BILLING_PROVIDER` (`sandbox`, the default, or `stripe`), `STRIPE_API_KEY`,
    /// `STRIPE_WEBHOOK_SECRET` and `STRIPE_BASE_URL`. In a Lambda function the keys are
    /// fields of the JSON secret `BILLING_KEYS_SECRET` names, never plain variables.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let present = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        match present("BILLING_PROVIDER").as_deref().map(str::trim) {
            None | Some("sandbox") => return Ok(Self::Sandbox),
            Some("stripe") => {}
            Some(other) => anyhow::bail!("BILLING_PROVIDER={other:?} is not one of sandbox, stripe"),
        }
        let in_lambda = present("AWS_LAMBDA_RUNTIME_API").is_some();
        let keys_secret = present("BILLING_KEYS_SECRET");
        let key = |name: &'static str| -> anyhow::Result<ProviderKey> {
            match (present(name), &keys_secret) {
                (Some(_), _) if in_lambda => anyhow::bail!(
                    "{name} may not be a plain environment variable of a function: put it in the Secrets Manager \
                     secret BILLING_KEYS_SECRET names"
                ),
                (Some(value), _) => {
                    anyhow::ensure!(!is_unresolved_reference(&value), "{name} is an unresolved dynamic reference");
                    Ok(ProviderKey::Value(value))
                }
                (None, Some(secret)) => Ok(ProviderKey::Secret { secret: secret.clone(), field: name }),
                (None, None) => anyhow::bail!(
                    "{name} (or BILLING_KEYS_SECRET, a Secrets Manager secret holding it) must be set for \
                     BILLING_PROVIDER=stripe"
                ),
            }
        };
        Ok(Self::Stripe(StripeSettings {
            base_url: present("STRIPE_BASE_URL").unwrap_or_else(|| STRIPE_BASE_URL.to_owned()),
            api_key: key("STRIPE_API_KEY")?,
            webhook_secret: key("STRIPE_WEBHOOK_SECRET")?,
        }))
    }
}

/// The font drawn text uses when none is configured: Debian's `fonts-dejavu-core`.
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Default address of OpenAI's API (the official SDKs' `OPENAI_BASE_URL` default).
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Default address of the Gemini API.
pub const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// Generation providers and the local tools they use.
#[derive(Clone, Debug)]
pub struct GenerationSettings {
    pub image: ProviderChoice,
    pub video: ProviderChoice,
    pub speech: ProviderChoice,
    pub openai: Option<ProviderAccess>,
    pub gemini: Option<ProviderAccess>,
    /// The espeak-ng program (local speech).
    pub espeak: PathBuf,
    /// The font drawn text uses (local images and video).
    pub font: PathBuf,
}

impl Default for GenerationSettings {
    /// Every kind made locally, espeak-ng on the PATH, Debian's DejaVu Sans.
    fn default() -> Self {
        Self {
            image: ProviderChoice::Local,
            video: ProviderChoice::Local,
            speech: ProviderChoice::Local,
            openai: None,
            gemini: None,
            espeak: PathBuf::from("espeak-ng"),
            font: PathBuf::from(DEFAULT_FONT),
        }
    }
}

impl GenerationSettings {
    /// Reads `IMAGE_PROVIDER` and `SPEECH_PROVIDER` (`local` or `openai`),
    /// `VIDEO_PROVIDER` (`local` or `gemini`: the veo models through Gemini, the others
    /// locally), `OPENAI_API_KEY` / `OPENAI_BASE_URL`, `GEMINI_API_KEY` /
    /// `GEMINI_BASE_URL`, `ESPEAK_PATH` and `GENERATION_FONT`. A provider chosen without
    /// its key is refused at start, naming the variable. In a Lambda function the keys are
    /// fields (`OPENAI_API_KEY`, `GEMINI_API_KEY`) of the JSON secret `PROVIDER_KEYS_SECRET`
    /// names, never plain variables.
    pub fn from_env() -> anyhow::Result<Self> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    /// As [`Self::from_env`], with the variables `lookup` answers.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let present = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        let choice = |name: &str, allowed: &[(&str, ProviderChoice)]| -> anyhow::Result<ProviderChoice> {
            let Some(text) = present(name) else { return Ok(ProviderChoice::Local) };
            let names: Vec<&str> = allowed.iter().map(|(name, _)| *name).collect();
            allowed
                .iter()
                .find(|(known, _)| *known == text.trim())
                .map(|(_, choice)| *choice)
                .ok_or_else(|| anyhow::anyhow!("{name}={text:?} is not one of {}", names.join(", ")))
        };
        let local = ("local", ProviderChoice::Local);
        let image = choice("IMAGE_PROVIDER", &[local, ("openai", ProviderChoice::OpenAi)])?;
        let speech = choice("SPEECH_PROVIDER", &[local, ("openai", ProviderChoice::OpenAi)])?;
        let video = choice("VIDEO_PROVIDER", &[local, ("gemini", ProviderChoice::Gemini)])?;
        let in_lambda = present("AWS_LAMBDA_RUNTIME_API").is_some();
        let keys_secret = present("PROVIDER_KEYS_SECRET");
        let access =
            |key: &'static str, base: &str, default: &str, wanted: bool| -> anyhow::Result<Option<ProviderAccess>> {
                if !wanted {
                    return Ok(None);
                }
                let key = match (present(key), &keys_secret) {
                    (Some(_), _) if in_lambda => anyhow::bail!(
                        "{key} may not be a plain environment variable of a function: put it in the Secrets Manager \
                         secret PROVIDER_KEYS_SECRET names"
                    ),
                    (Some(value), _) => {
                        anyhow::ensure!(!is_unresolved_reference(&value), "{key} is an unresolved dynamic reference");
                        ProviderKey::Value(value)
                    }
                    (None, Some(secret)) => ProviderKey::Secret { secret: secret.clone(), field: key },
                    (None, None) => anyhow::bail!(
                        "{key} (or PROVIDER_KEYS_SECRET, a Secrets Manager secret holding it) must be set for the \
                         provider chosen"
                    ),
                };
                let base_url = present(base).unwrap_or_else(|| default.to_owned()).trim_end_matches('/').to_owned();
                Ok(Some(ProviderAccess { base_url, key }))
            };
        let wants_openai = image == ProviderChoice::OpenAi || speech == ProviderChoice::OpenAi;
        let defaults = Self::default();
        Ok(Self {
            image,
            video,
            speech,
            openai: access("OPENAI_API_KEY", "OPENAI_BASE_URL", OPENAI_BASE_URL, wants_openai)?,
            gemini: access("GEMINI_API_KEY", "GEMINI_BASE_URL", GEMINI_BASE_URL, video == ProviderChoice::Gemini)?,
            espeak: present("ESPEAK_PATH").map(PathBuf::from).unwrap_or(defaults.espeak),
            font: present("GENERATION_FONT").map(PathBuf::from).unwrap_or(defaults.font),
        })
    }
}

impl Default for Settings {
    /// ffmpeg and ffprobe on the PATH, yt-dlp as [`default_yt_dlp`] finds it, scratch
    /// files in the temporary folder, 15 minutes a task, the default webhook schedule,
    /// no extra site hosts, keys checked on every request, the SSRF guard on.
    fn default() -> Self {
        Self {
            ffmpeg: PathBuf::from("ffmpeg"),
            ffprobe: PathBuf::from("ffprobe"),
            yt_dlp: default_yt_dlp(),
            scratch: std::env::temp_dir().join("video-workflow-tasks"),
            task_budget: DEFAULT_TASK_BUDGET,
            segment: segment_of(DEFAULT_SEGMENT_SECONDS),
            claim_margin: Duration::from_secs(120),
            webhook_schedule: WebhookSchedule::default(),
            video_site_hosts: Vec::new(),
            auth_cache_ttl: Duration::ZERO,
            allow_private_urls: false,
            idempotency_lease: crate::domain::idempotency::CLAIM_LEASE,
            sweep: Default::default(),
            generation: GenerationSettings::default(),
            blocked_retry: Duration::from_secs(10),
            prices: Default::default(),
            top_up_wait: Duration::from_secs(600),
            billing: BillingSettings::Sandbox,
            youtube_api_url: YOUTUBE_API_URL.to_owned(),
            youtube_token_url: YOUTUBE_TOKEN_URL.to_owned(),
            social_secret_prefix: "video-workflow/social".to_owned(),
        }
    }
}

/// `CREDIT_PRICES`: `catalog` (the default) or `free` (tasks cost nothing).
pub fn prices_from_env() -> anyhow::Result<crate::domain::runs::charges::Prices> {
    use crate::domain::runs::charges::Prices;
    match std::env::var("CREDIT_PRICES").ok().as_deref() {
        None | Some("") | Some("catalog") => Ok(Prices::Catalog),
        Some("free") => Ok(Prices::Free),
        Some(other) => anyhow::bail!("CREDIT_PRICES={other:?} is neither \"catalog\" nor \"free\""),
    }
}

/// The yt-dlp program when none is configured: `$YT_DLP_PATH`, else the one `scripts/serve.sh`
/// and `scripts/test.sh` install into `.local/venv`, else `yt-dlp` on the PATH.
pub fn default_yt_dlp() -> PathBuf {
    if let Some(path) = std::env::var_os("YT_DLP_PATH").filter(|path| !path.is_empty()) {
        return PathBuf::from(path);
    }
    let installed = PathBuf::from(".local/venv/bin/yt-dlp");
    match installed.canonicalize() {
        Ok(path) => path,
        Err(_) => PathBuf::from("yt-dlp"),
    }
}

/// Typed configuration of a Lambda function or of `serve --backend aws`.
#[derive(Clone, Debug)]
pub struct Config {
    /// The DynamoDB table holding every item.
    pub table_name: String,
    /// The S3 bucket of uploads and outputs.
    pub media_bucket: String,
    /// The SQS queue of node tasks; None leaves the run endpoints unavailable (503).
    pub task_queue_url: Option<String>,
    /// The API's address as callers reach it: media links start with it. Empty: the
    /// address the request came to.
    pub public_url: String,
    /// The secret that signs media links; every function of a deployment shares it.
    pub media_link_secret: Option<String>,
    /// The SQS queue of webhook deliveries.
    pub webhook_queue_url: Option<String>,
    /// Programs, budgets and schedules.
    pub settings: Settings,
}

/// The default segment: a minute of 1080p renders in 25–28 s on one core of this
/// machine (docs/performance.md, "Long outputs in parts"), so two minutes take about a
/// minute on a 3,008 MB function's two vCPUs, far inside its 900 s, and a one-hour output
/// is 30 parts.
pub const DEFAULT_SEGMENT_SECONDS: u64 = 120;

/// The segment length of a setting in seconds: None (one pass) for 0.
pub fn segment_of(seconds: u64) -> Option<Duration> {
    (seconds > 0).then(|| Duration::from_secs(seconds))
}

impl Config {
    /// Reads `TABLE_NAME`, `AUTH_CACHE_SECONDS` (default 30), `MEDIA_BUCKET`,
    /// `FFPROBE_PATH` / `FFMPEG_PATH` (default: on the PATH), `TASK_QUEUE_URL`,
    /// `PUBLIC_URL` (default: the request's host), `MEDIA_LINK_SECRET`,
    /// `TASK_TIMEOUT_SECONDS` (default 900), `SEGMENT_SECONDS` (default
    /// [`DEFAULT_SEGMENT_SECONDS`]; 0 renders in one pass), `YOUTUBE_API_URL` (default YouTube's),
    /// `SOCIAL_SECRET_PREFIX` (default `video-workflow/social`), `WEBHOOK_QUEUE_URL` and the webhook
    /// schedule ([`webhook_schedule_from_env`]), `YT_DLP_PATH`, `VIDEO_SITE_HOSTS`
    /// (comma-separated) and `ALLOW_PRIVATE_URLS` (default false).
    ///
    /// In a Lambda function (`AWS_LAMBDA_RUNTIME_API` set) `TABLE_NAME` and
    /// `MEDIA_BUCKET` must be set: a default there would be another deployment's table.
    /// A `MEDIA_LINK_SECRET` that is still a `{{resolve:...}}` reference is refused
    /// everywhere: its text is in the template, so links signed with it could be forged.
    pub fn from_env() -> anyhow::Result<Self> {
        let variable = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
        let present = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let in_lambda = present("AWS_LAMBDA_RUNTIME_API").is_some();
        let named = |name: &str, default: &str| match present(name) {
            Some(value) => Ok(value),
            None if in_lambda => Err(anyhow::anyhow!("{name} must be set in a Lambda function")),
            None => Ok(default.to_owned()),
        };
        let whole = |name: &str, default: u64| -> anyhow::Result<u64> {
            match std::env::var(name) {
                Ok(text) => text.parse().with_context(|| format!("{name}={text:?} is not a whole number")),
                Err(_) => Ok(default),
            }
        };
        let seconds = whole("AUTH_CACHE_SECONDS", 30)?;
        let task_seconds = whole("TASK_TIMEOUT_SECONDS", DEFAULT_TASK_BUDGET.as_secs())?;
        anyhow::ensure!(task_seconds > 0, "TASK_TIMEOUT_SECONDS must be at least 1");
        let settings = Settings {
            ffmpeg: PathBuf::from(variable("FFMPEG_PATH", "ffmpeg")),
            ffprobe: PathBuf::from(variable("FFPROBE_PATH", "ffprobe")),
            task_budget: Duration::from_secs(task_seconds),
            segment: segment_of(whole("SEGMENT_SECONDS", DEFAULT_SEGMENT_SECONDS)?),
            // A shorter margin brings a killed worker's task back sooner (the chaos test
            // kills `serve` processes and waits for their tasks, tests/tests/api/chaos.rs).
            claim_margin: Duration::from_secs(whole(
                "CLAIM_MARGIN_SECONDS",
                Settings::default().claim_margin.as_secs(),
            )?),
            webhook_schedule: webhook_schedule_from_env()?,
            video_site_hosts: video_site_hosts_from_env(),
            auth_cache_ttl: Duration::from_secs(seconds),
            allow_private_urls: flag("ALLOW_PRIVATE_URLS")?,
            generation: GenerationSettings::from_env()?,
            prices: prices_from_env()?,
            top_up_wait: Duration::from_secs(whole("TOP_UP_WAIT_SECONDS", 600)?),
            billing: BillingSettings::from_lookup(&|name| std::env::var(name).ok())?,
            youtube_api_url: variable("YOUTUBE_API_URL", YOUTUBE_API_URL).trim_end_matches('/').to_owned(),
            youtube_token_url: variable("YOUTUBE_TOKEN_URL", YOUTUBE_TOKEN_URL),
            social_secret_prefix: variable("SOCIAL_SECRET_PREFIX", "video-workflow/social"),
            ..Settings::default()
        };
        let media_link_secret = present("MEDIA_LINK_SECRET");
        if media_link_secret.as_deref().is_some_and(is_unresolved_reference) {
            anyhow::bail!(
                "MEDIA_LINK_SECRET is an unresolved dynamic reference ({{{{resolve:...}}}}), not the secret: \
                 the deployment did not read it from Secrets Manager"
            );
        }
        Ok(Self {
            table_name: named("TABLE_NAME", DEFAULT_TABLE_NAME)?,
            media_bucket: named("MEDIA_BUCKET", DEFAULT_MEDIA_BUCKET)?,
            task_queue_url: present("TASK_QUEUE_URL"),
            public_url: variable("PUBLIC_URL", "").trim_end_matches('/').to_owned(),
            media_link_secret,
            webhook_queue_url: present("WEBHOOK_QUEUE_URL"),
            settings,
        })
    }
}

/// Whether a setting's value is a CloudFormation dynamic reference that was never
/// resolved (`{{resolve:secretsmanager:...}}` copied as text).
pub fn is_unresolved_reference(value: &str) -> bool {
    value.trim_start().starts_with("{{resolve:")
}

/// A yes/no setting: `true`/`1` or `false`/`0`; unset or empty is false.
fn flag(name: &str) -> anyhow::Result<bool> {
    match std::env::var(name).unwrap_or_default().trim() {
        "" | "false" | "0" => Ok(false),
        "true" | "1" => Ok(true),
        other => anyhow::bail!("{name}={other:?} is neither true nor false"),
    }
}

/// Most retries a webhook schedule may have: with early copies and storage trouble, the
/// receives of a message stay under the webhook queue's `maxReceiveCount` (20).
pub const MAX_WEBHOOK_RETRIES: usize = 8;

/// The webhook schedule: `WEBHOOK_RETRY_DELAYS_MS` (comma-separated delays before each
/// retry; default 60000,120000,240000,480000,960000) and `WEBHOOK_TIMEOUT_MS` (default
/// 10000). Tests shorten both.
pub fn webhook_schedule_from_env() -> anyhow::Result<WebhookSchedule> {
    let mut schedule = WebhookSchedule::default();
    if let Ok(text) = std::env::var("WEBHOOK_RETRY_DELAYS_MS") {
        schedule.retries = text
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(|part| part.parse::<u64>().map(Duration::from_millis))
            .collect::<Result<_, _>>()
            .with_context(|| format!("WEBHOOK_RETRY_DELAYS_MS={text:?} is not a list of whole numbers"))?;
        // Every retry is a receive of its SQS message, which the queue dead-letters after 20.
        anyhow::ensure!(
            schedule.retries.len() <= MAX_WEBHOOK_RETRIES,
            "WEBHOOK_RETRY_DELAYS_MS has more than {MAX_WEBHOOK_RETRIES} delays"
        );
        anyhow::ensure!(
            schedule.retries.iter().all(|delay| *delay <= Duration::from_secs(12 * 3600)),
            "WEBHOOK_RETRY_DELAYS_MS: SQS holds a message back 12 hours at most"
        );
    }
    if let Ok(text) = std::env::var("WEBHOOK_TIMEOUT_MS") {
        let millis: u64 = text.parse().with_context(|| format!("WEBHOOK_TIMEOUT_MS={text:?} is not a whole number"))?;
        anyhow::ensure!(millis > 0, "WEBHOOK_TIMEOUT_MS must be at least 1");
        schedule.timeout = Duration::from_millis(millis);
    }
    Ok(schedule)
}

/// `VIDEO_SITE_HOSTS`: hosts (comma-separated) read as video-sharing sites beyond the
/// known ones.
pub fn video_site_hosts_from_env() -> Vec<String> {
    std::env::var("VIDEO_SITE_HOSTS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|host| !host.is_empty())
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripe_keys_are_given_locally_and_kept_in_secrets_manager_by_functions() {
        let lookup = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| (*value).to_owned())
        };
        assert_eq!(BillingSettings::from_lookup(&lookup(&[])).unwrap(), BillingSettings::Sandbox);
        let local = BillingSettings::from_lookup(&lookup(&[
            ("BILLING_PROVIDER", "stripe"),
            ("STRIPE_API_KEY", "sk_test"),
            ("STRIPE_WEBHOOK_SECRET", "whsec"),
        ]))
        .unwrap();
        let BillingSettings::Stripe(stripe) = local else { panic!("stripe") };
        assert_eq!((stripe.api_key, stripe.base_url.as_str()), (ProviderKey::Value("sk_test".into()), STRIPE_BASE_URL));
        let refused = BillingSettings::from_lookup(&lookup(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("BILLING_PROVIDER", "stripe"),
            ("STRIPE_API_KEY", "sk_live"),
        ]))
        .unwrap_err();
        assert!(refused.to_string().contains("may not be a plain environment variable"), "{refused}");
        let kept = BillingSettings::from_lookup(&lookup(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("BILLING_PROVIDER", "stripe"),
            ("BILLING_KEYS_SECRET", "arn:keys"),
        ]))
        .unwrap();
        let BillingSettings::Stripe(stripe) = kept else { panic!("stripe") };
        assert_eq!(
            stripe.webhook_secret,
            ProviderKey::Secret { secret: "arn:keys".into(), field: "STRIPE_WEBHOOK_SECRET" }
        );
        let missing = BillingSettings::from_lookup(&lookup(&[("BILLING_PROVIDER", "stripe")])).unwrap_err();
        assert!(missing.to_string().contains("BILLING_KEYS_SECRET"), "{missing}");
        let wrong = BillingSettings::from_lookup(&lookup(&[("BILLING_PROVIDER", "paypal")])).unwrap_err();
        assert!(wrong.to_string().contains("sandbox, stripe"), "{wrong}");
    }

    #[test]
    fn provider_keys_are_given_locally_and_kept_in_secrets_manager_by_functions() {
        let lookup = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| (*value).to_owned())
        };
        let local = GenerationSettings::from_lookup(&lookup(&[("IMAGE_PROVIDER", "openai"), ("OPENAI_API_KEY", "sk")]))
            .unwrap();
        assert_eq!(local.openai.unwrap().key, ProviderKey::Value("sk".into()));
        const FUNCTION: &[(&str, &str)] = &[("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"), ("IMAGE_PROVIDER", "openai")];
        let refused = GenerationSettings::from_lookup(&lookup(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("IMAGE_PROVIDER", "openai"),
            ("OPENAI_API_KEY", "sk"),
        ]))
        .unwrap_err();
        assert!(refused.to_string().contains("may not be a plain environment variable"), "{refused}");
        let missing = GenerationSettings::from_lookup(&lookup(FUNCTION)).unwrap_err();
        assert!(missing.to_string().contains("PROVIDER_KEYS_SECRET"), "{missing}");
        let kept = GenerationSettings::from_lookup(&lookup(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("VIDEO_PROVIDER", "gemini"),
            ("PROVIDER_KEYS_SECRET", "arn:aws:secretsmanager:us-east-1:1:secret:keys"),
        ]))
        .unwrap();
        let gemini = kept.gemini.unwrap();
        let secret = "arn:aws:secretsmanager:us-east-1:1:secret:keys".to_owned();
        assert_eq!(gemini.key, ProviderKey::Secret { secret, field: "GEMINI_API_KEY" });
        assert_eq!(gemini.base_url, GEMINI_BASE_URL);
        assert!(kept.openai.is_none() && kept.image == ProviderChoice::Local);
        let wrong = GenerationSettings::from_lookup(&lookup(&[("VIDEO_PROVIDER", "runway")])).unwrap_err();
        assert!(wrong.to_string().contains("VIDEO_PROVIDER=\"runway\" is not one of local, gemini"), "{wrong}");
        assert_eq!(format!("{:?}", ProviderKey::Value("sk-secret".into())), "Value(<hidden>)");
    }

    #[test]
    fn a_dynamic_reference_left_as_text_is_not_a_secret() {
        assert!(is_unresolved_reference("{{resolve:secretsmanager:LinkSecret:SecretString}}"));
        assert!(is_unresolved_reference(" {{resolve:ssm:name}}"));
        assert!(!is_unresolved_reference("a7Fq{{resolve:"));
        assert!(!is_unresolved_reference("plain-secret"));
    }
}
