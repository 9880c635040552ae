//! What a node type (a tile) is and what its module gives the catalog: its kind, its
//! parameters' schema and typed settings, its price, and what it asks of the engine
//! (an edit, a generation, an upload, a trigger). Each tile's module builds its
//! [`NodeType`] from these; `nodes` (the catalog) lists them.

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use jsonschema::Validator;
use serde::Serialize;
use serde_json::{Map, Value};

use super::messages::{describe_error, MAX_MESSAGES};
use super::placement::Placement;
use crate::domain::generation::{GenerationError, Generators, Stop};
use crate::domain::ids::{NodeTypeId, UploadId};
use crate::domain::media::{Edit, MediaType};
use crate::domain::uploads::UploadKind;

/// What role a node plays in a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// Starts runs; nothing connects into it.
    Trigger,
    /// Supplies the media a run starts from; nothing connects into it.
    Input,
    /// Transforms media with ffmpeg.
    Edit,
    /// Creates media with a generative model.
    Generation,
    /// Receives the finished media; nothing leaves it.
    Destination,
}

/// How a node takes the items that reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemFlow {
    /// One task per item (a chain of such edits is done in one pass).
    EachItem,
    /// One task that joins every item reaching it (Concatenate).
    AllItems,
}

/// Makes a node's typed parameters from parameters that passed its schema.
pub(super) type SettingsOf = fn(&Map<String, Value>) -> Arc<dyn NodeSettings>;

/// One entry of the catalog.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "An entry of the node-type catalog.")]
pub struct NodeType {
    /// Stable identifier; never changes once published.
    #[schema(value_type = uuid::Uuid)]
    pub id: NodeTypeId,
    /// Human-readable name.
    pub name: &'static str,
    /// Role in a graph.
    pub kind: NodeKind,
    /// True when a run-time `update_params` may not change this node's parameters.
    pub protected: bool,
    /// JSON Schema (draft 2020-12) of the node's parameters; no property is required.
    #[schema(value_type = Map<String, Value>)]
    pub params_schema: Value,
    /// Price of one execution.
    pub credit_cost: CreditCost,
    /// How the node takes the items reaching it.
    #[serde(skip)]
    #[schema(ignore)]
    pub flow: ItemFlow,
    /// What a generation node makes (None for the other kinds).
    #[serde(skip)]
    #[schema(ignore)]
    pub produces: Option<MediaType>,
    /// A generated medium an edit takes through a connection, besides the video it edits.
    #[serde(skip)]
    #[schema(ignore)]
    pub connectable: Option<Connectable>,
    /// Its typed parameters, from parameters that passed the schema.
    #[serde(skip)]
    #[schema(ignore)]
    pub(super) settings: SettingsOf,
    /// Compiled on the first validation, so that code which only reads the catalog
    /// (names, kinds, a run's views) links no JSON Schema compiler.
    #[serde(skip)]
    #[schema(ignore)]
    pub(super) validator: OnceLock<Validator>,
}

impl Debug for NodeType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeType").field("id", &self.id).field("name", &self.name).field("kind", &self.kind).finish()
    }
}

/// A medium an edit node takes through a connection from a generation node (an image
/// into Overlay, audio into Background Music), in place of the upload `param` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connectable {
    pub media: MediaType,
    pub param: &'static str,
}

/// Words a talking avatar says per second, to reserve its price from its script.
const WORDS_PER_SECOND: f64 = 2.5;
/// Characters it says per second, for scripts written without spaces.
const CHARACTERS_PER_SECOND: f64 = 8.0;

/// Media a provider makes from a request of its kind (`generation::ImageRequest`,
/// `VideoRequest`, `AudioRequest`, or a new kind's own type). A new generation kind
/// implements this for its request in its tile's module, and gives a provider of it
/// (the local one in `adapters::local_generation`); nothing else changes.
#[async_trait]
pub trait MediaRequest: Debug + Send + Sync {
    /// The text the media is made from (`query` in `sources`).
    fn prompt(&self) -> &str;
    /// How long its media is expected to be, in seconds (an image: 0), before it is
    /// made: what a charge per output second is reserved on.
    fn expected_seconds(&self) -> f64;
    /// What it makes.
    fn media(&self) -> MediaType;
    /// Asks the provider of its kind among `generators` to write the media to `output`
    /// (`generators.generate(self, output, stop)`): the provider's name, and what it did.
    async fn generate(
        &self,
        generators: &Generators,
        output: &Path,
        stop: &Stop,
    ) -> (String, Result<(), GenerationError>);
}

/// What a generation node asks for.
#[derive(Clone, Debug)]
pub enum Generation {
    /// Media a provider makes from the request.
    Media(Arc<dyn MediaRequest>),
    /// A talking avatar of the profile reading the script: its task waits for the
    /// profile, has the script spoken, then has the avatar made.
    Avatar { profile: String, script: String, video_model: String },
}

impl Generation {
    /// The text the media was made from (`query` in `sources`).
    pub fn prompt(&self) -> &str {
        match self {
            Self::Media(request) => request.prompt(),
            Self::Avatar { script, .. } => script,
        }
    }

    /// How long its media is expected to be, in seconds (an image: 0), before it is
    /// made: what a charge per output second is reserved on.
    pub fn expected_seconds(&self) -> f64 {
        match self {
            Self::Media(request) => request.expected_seconds(),
            Self::Avatar { script, .. } => {
                // Words, or characters for a script without spaces (Chinese, Japanese):
                // whichever makes the longer speech.
                let words = script.split_whitespace().count() as f64 / WORDS_PER_SECOND;
                let characters = script.chars().filter(|c| !c.is_whitespace()).count() as f64;
                words.max(characters / CHARACTERS_PER_SECOND).max(1.0)
            }
        }
    }

    /// What it makes.
    pub fn media(&self) -> MediaType {
        match self {
            Self::Media(request) => request.media(),
            Self::Avatar { .. } => MediaType::Video,
        }
    }
}

/// An upload a node's parameters name, which a run reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadUse {
    /// The parameter naming it (`audio_id`).
    pub param: &'static str,
    pub kind: UploadKind,
    /// The parameter's text, when it is set.
    pub value: Option<String>,
}

/// Why a node cannot run as its parameters stand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unready {
    /// A parameter it needs is not set.
    Needs(&'static str),
    /// Its parameters ask for something refused; the text says what.
    Refused(String),
}

/// What a trigger node starts runs on, from its parameters (defaults applied).
#[derive(Clone, Debug, PartialEq)]
pub enum TriggerSpec {
    /// A cron schedule in a time zone (default UTC); `run_request` is the start body.
    Schedule { cron: Option<String>, timezone: String, run_request: Map<String, Value>, enabled: bool },
    /// A feed polled every `poll_minutes`; `run_request` holds `update_params` and `callback_url`.
    Feed { feed_url: Option<String>, poll_minutes: u64, run_request: Map<String, Value>, enabled: bool },
}

impl TriggerSpec {
    /// Whether the trigger fires.
    pub fn enabled(&self) -> bool {
        match self {
            Self::Schedule { enabled, .. } | Self::Feed { enabled, .. } => *enabled,
        }
    }
}

/// A file a node needs written into its task's scratch folder before its edit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScratchFile {
    /// The file's extension (the toolkit reads formats by it).
    pub extension: &'static str,
    pub contents: String,
}

/// What a node's edit is given by the worker.
pub struct EditContext<'a> {
    /// Where the toolkit reads an upload the run resolved (None: not available).
    pub files: &'a dyn Fn(UploadId) -> Option<String>,
    /// Where the node's [`ScratchFile`] was written, when it has one.
    pub scratch_file: Option<PathBuf>,
    /// Where the generated medium connected into the node is (see [`Connectable`]).
    pub connected: Option<String>,
}

/// A node's typed parameters and what the engine asks of them. Every hook has the
/// answer of a node that takes no part in it, so a node type implements only its own.
pub trait NodeSettings: Send + Sync + Debug {
    /// The uploads its parameters name, read by the run (checked when it starts).
    fn uploads(&self) -> Vec<UploadUse> {
        Vec::new()
    }

    /// Whether the node has what it needs to run, beyond its schema; checked when a run
    /// starts.
    fn check(&self) -> Result<(), Unready> {
        Ok(())
    }

    /// A file to write into the task's scratch folder for its edit.
    fn scratch_file(&self) -> Option<ScratchFile> {
        None
    }

    /// What a generation node asks its provider for (None: the node generates nothing).
    fn generation(&self) -> Option<Generation> {
        None
    }

    /// What a trigger node starts runs on (None for the other kinds).
    fn trigger(&self) -> Option<TriggerSpec> {
        None
    }

    /// The edit it contributes to a render; None when it leaves the media as it is.
    fn edit(&self, _context: &EditContext<'_>) -> Result<Option<Edit>, String> {
        Ok(None)
    }

    /// Where media play after this node, from where they played before it and the
    /// media's length: the output's edit decisions (`sources`, the timeline project).
    fn place(&self, placed: Vec<Placement>, length: u64) -> (Vec<Placement>, u64) {
        (placed, length)
    }
}

/// The settings of a node type that has no typed parameters the engine reads.
#[derive(Debug)]
pub(super) struct NoSettings;

impl NodeSettings for NoSettings {}

pub(super) fn no_settings(_params: &Map<String, Value>) -> Arc<dyn NodeSettings> {
    Arc::new(NoSettings)
}

/// How an execution of a node is priced.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreditCost {
    /// What the credits are counted per.
    pub unit: CostUnit,
    /// Credits per unit before multipliers.
    pub credits: u32,
    /// Factors applied when a parameter has a given value.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub multipliers: Vec<CostMultiplier>,
}

/// What a node's credits are counted per.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CostUnit {
    /// Never charged.
    Free,
    /// Charged once per execution.
    PerRun,
    /// Charged per started second of produced media.
    PerOutputSecond,
}

/// Multiplies the price when parameter `param` equals `equals`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CostMultiplier {
    /// Parameter name.
    pub param: &'static str,
    /// Value that triggers the multiplier.
    pub equals: Value,
    /// Factor applied to the price.
    pub factor: u32,
}

impl CreditCost {
    pub(super) fn free() -> Self {
        Self { unit: CostUnit::Free, credits: 0, multipliers: Vec::new() }
    }

    pub(super) fn per_run(credits: u32, multipliers: Vec<CostMultiplier>) -> Self {
        Self { unit: CostUnit::PerRun, credits, multipliers }
    }

    pub(super) fn per_output_second(credits: u32, multipliers: Vec<CostMultiplier>) -> Self {
        Self { unit: CostUnit::PerOutputSecond, credits, multipliers }
    }
}

pub(super) fn multiplier(param: &'static str, equals: &str, factor: u32) -> CostMultiplier {
    CostMultiplier { param, equals: Value::from(equals), factor }
}

impl NodeType {
    /// Checks params against the schema; Err holds a message naming the parameter, e.g. "params_used.speed: 5.0 is greater than the maximum of 4"
    pub fn validate_params(&self, params: &Map<String, Value>) -> Result<(), String> {
        // The validator reads a `Value`; parameter maps are small, so one copy is cheap.
        let instance = Value::Object(params.clone());
        let mut messages: Vec<String> = Vec::new();
        // The schemas are constants written in the node types' modules and every one is
        // compiled by the unit tests, so a failure here is a programming error that cannot
        // depend on input.
        let validator = self.validator.get_or_init(|| {
            jsonschema::validator_for(&self.params_schema)
                .unwrap_or_else(|error| panic!("node type {} has an invalid params schema: {error}", self.name))
        });
        for error in validator.iter_errors(&instance) {
            for message in describe_error(&error, &self.params_schema) {
                if !messages.contains(&message) {
                    messages.push(message);
                }
            }
            // Enough to fix the request; the rest would only bloat the response.
            if messages.len() >= MAX_MESSAGES {
                break;
            }
        }
        if messages.is_empty() {
            Ok(())
        } else {
            messages.truncate(MAX_MESSAGES);
            Err(messages.join("; "))
        }
    }

    /// False for Trigger and Input kinds: nothing may connect into them.
    pub fn accepts_inputs(&self) -> bool {
        !matches!(self.kind, NodeKind::Trigger | NodeKind::Input)
    }

    /// False for Destination: nothing may leave it.
    pub fn has_outputs(&self) -> bool {
        self.kind != NodeKind::Destination
    }

    /// Credits for one execution producing `output_seconds` of media with these params (free → 0; per_run → credits × multipliers; per_output_second → ceil(seconds) × credits × multipliers that match params).
    pub fn credits_for(&self, params: &Map<String, Value>, output_seconds: f64) -> u64 {
        let cost = &self.credit_cost;
        let factor = cost
            .multipliers
            .iter()
            .filter(|m| params.get(m.param) == Some(&m.equals))
            .fold(1u64, |acc, m| acc.saturating_mul(u64::from(m.factor)));
        let units = match cost.unit {
            CostUnit::Free => return 0,
            CostUnit::PerRun => 1,
            // `as` saturates (negative → 0, infinite → u64::MAX) and maps NaN to 0, so a bad
            // duration from a probe can neither wrap nor panic.
            CostUnit::PerOutputSecond => output_seconds.ceil() as u64,
        };
        units.saturating_mul(u64::from(cost.credits)).saturating_mul(factor)
    }
}
