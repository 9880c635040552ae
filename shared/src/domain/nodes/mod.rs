//! The node types: every kind of node a workflow graph may contain. Each node type is one
//! module of this folder with its catalog entry (ID, name, kind, parameter schema, price),
//! its typed parameters (parsed once, defaults in one place) and what the engine needs
//! from it (the uploads it reads, the edit it contributes to a render, its scratch files,
//! its timeline placement). The planner, the worker and the timeline ask the node type;
//! they never compare IDs. Adding a node type: a module here and one line in [`TILES`].

mod ai_avatar;
mod audio_generation;
mod background_music;
mod captions;
mod channel_feed;
mod clip;
mod concatenate;
mod destination;
mod image_generation;
mod messages;
mod overlay;
pub mod placement;
mod reframe;
mod schedule;
mod schema;
mod speed;
mod video_generation;
mod video_input;

use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use jsonschema::Validator;
use serde::Serialize;
use serde_json::{Map, Value};

use messages::{describe_error, MAX_MESSAGES};
use placement::Placement;

use super::generation::{AudioRequest, ImageRequest, VideoRequest};
use super::media::{Edit, MediaType};
use super::uploads::UploadKind;
use crate::domain::ids::UploadId;

pub use crate::domain::ids::NodeTypeId;
pub use ai_avatar::ID as AI_AVATAR;
pub use audio_generation::ID as AUDIO_GENERATION;
pub use background_music::ID as BACKGROUND_MUSIC;
pub use captions::ID as CAPTIONS;
pub use channel_feed::ID as CHANNEL_FEED_TRIGGER;
pub use clip::ID as CLIP;
pub use concatenate::ID as CONCATENATE;
pub use destination::ID as DESTINATION;
pub use image_generation::ID as IMAGE_GENERATION;
pub use overlay::ID as OVERLAY;
pub use reframe::ID as REFRAME;
pub use schedule::ID as SCHEDULE_TRIGGER;
pub use speed::ID as SPEED;
pub use video_generation::ID as VIDEO_GENERATION;
pub use video_input::ID as VIDEO_INPUT;

/// Every node type, in the catalog's stable order: the two triggers, Video Input, the
/// seven edits (clip, reframe, captions, background music, overlay, speed, concatenate),
/// the four generations (AI avatar, video, audio, image), then Destination.
const TILES: &[fn() -> NodeType] = &[
    schedule::node_type,
    channel_feed::node_type,
    video_input::node_type,
    clip::node_type,
    reframe::node_type,
    captions::node_type,
    background_music::node_type,
    overlay::node_type,
    speed::node_type,
    concatenate::node_type,
    ai_avatar::node_type,
    video_generation::node_type,
    audio_generation::node_type,
    image_generation::node_type,
    destination::node_type,
];

/// Prefix of every parameter path in validation messages: the field clients send parameters in.
const PARAMS_FIELD: &str = "params_used";

/// What role a node plays in a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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

/// One entry of the catalog.
#[derive(Serialize)]
pub struct NodeType {
    /// Stable identifier; never changes once published.
    pub id: NodeTypeId,
    /// Human-readable name.
    pub name: &'static str,
    /// Role in a graph.
    pub kind: NodeKind,
    /// True when a run-time `update_params` may not change this node's parameters.
    pub protected: bool,
    /// JSON Schema (draft 2020-12) of the node's parameters; no property is required.
    pub params_schema: Value,
    /// Price of one execution.
    pub credit_cost: CreditCost,
    /// How the node takes the items reaching it.
    #[serde(skip)]
    pub flow: ItemFlow,
    /// What a generation node makes (None for the other kinds).
    #[serde(skip)]
    pub produces: Option<MediaType>,
    /// A generated medium an edit takes through a connection, besides the video it edits.
    #[serde(skip)]
    pub connectable: Option<Connectable>,
    /// Its typed parameters, from parameters that passed the schema.
    #[serde(skip)]
    settings: fn(&Map<String, Value>) -> Arc<dyn NodeSettings>,
    /// Compiled on the first validation, so that code which only reads the catalog
    /// (names, kinds, a run's views) links no JSON Schema compiler.
    #[serde(skip)]
    validator: OnceLock<Validator>,
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

/// What a generation node asks its provider to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Generation {
    Image(ImageRequest),
    Video(VideoRequest),
    Audio(AudioRequest),
    /// A talking avatar of the profile reading the script.
    Avatar {
        profile: String,
        script: String,
        video_model: String,
    },
}

impl Generation {
    /// The text the media was made from (`query` in `sources`).
    pub fn prompt(&self) -> &str {
        match self {
            Self::Image(request) => &request.prompt,
            Self::Video(request) => &request.prompt,
            Self::Audio(request) => &request.prompt,
            Self::Avatar { script, .. } => script,
        }
    }

    /// What it makes.
    pub fn media(&self) -> MediaType {
        match self {
            Self::Image(_) => MediaType::Image,
            Self::Audio(_) => MediaType::Audio,
            Self::Video(_) | Self::Avatar { .. } => MediaType::Video,
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
struct NoSettings;

impl NodeSettings for NoSettings {}

fn no_settings(_params: &Map<String, Value>) -> Arc<dyn NodeSettings> {
    Arc::new(NoSettings)
}

/// How an execution of a node is priced.
#[derive(Clone, Debug, Serialize)]
pub struct CreditCost {
    /// What the credits are counted per.
    pub unit: CostUnit,
    /// Credits per unit before multipliers.
    pub credits: u32,
    /// Factors applied when a parameter has a given value.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub multipliers: Vec<CostMultiplier>,
}

/// What a node's credits are counted per.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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
#[derive(Clone, Debug, Serialize)]
pub struct CostMultiplier {
    /// Parameter name.
    pub param: &'static str,
    /// Value that triggers the multiplier.
    pub equals: Value,
    /// Factor applied to the price.
    pub factor: u32,
}

impl CreditCost {
    fn free() -> Self {
        Self { unit: CostUnit::Free, credits: 0, multipliers: Vec::new() }
    }

    fn per_run(credits: u32, multipliers: Vec<CostMultiplier>) -> Self {
        Self { unit: CostUnit::PerRun, credits, multipliers }
    }

    fn per_output_second(credits: u32, multipliers: Vec<CostMultiplier>) -> Self {
        Self { unit: CostUnit::PerOutputSecond, credits, multipliers }
    }
}

fn multiplier(param: &'static str, equals: &str, factor: u32) -> CostMultiplier {
    CostMultiplier { param, equals: Value::from(equals), factor }
}

/// The whole catalog, in the order of [`TILES`].
pub fn catalog() -> &'static [NodeType] {
    static CATALOG: OnceLock<Vec<NodeType>> = OnceLock::new();
    CATALOG.get_or_init(|| TILES.iter().map(|node_type| node_type()).collect())
}

/// The node type with this id, if there is one.
pub fn find(id: NodeTypeId) -> Option<&'static NodeType> {
    catalog().iter().find(|node_type| node_type.id == id)
}

/// Whether a trigger of type `id` polls a feed (the scheduler reads feeds in a phase of
/// their own, after schedules).
pub fn polls_a_feed(id: NodeTypeId) -> bool {
    id == CHANNEL_FEED_TRIGGER
}

/// The typed parameters of a node of type `id` with these (schema-valid) parameters;
/// a node of an unknown type takes part in nothing.
pub fn settings_of(id: NodeTypeId, params: &Map<String, Value>) -> Arc<dyn NodeSettings> {
    match find(id) {
        Some(node_type) => (node_type.settings)(params),
        None => Arc::new(NoSettings),
    }
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::video_generation::MODELS_WITH_4K;
    use super::*;

    fn params(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("test params must be an object, got {other}"),
        }
    }

    fn node_type(id: NodeTypeId) -> &'static NodeType {
        find(id).unwrap()
    }

    fn refusal(id: NodeTypeId, value: Value) -> String {
        node_type(id).validate_params(&params(value)).unwrap_err()
    }

    fn nested_arrays(depth: usize) -> Value {
        let mut value = json!(1);
        for _ in 0..depth {
            value = Value::Array(vec![value]);
        }
        value
    }

    #[test]
    fn ids_are_unique_and_generation_ids_match_the_contract() {
        let ids: Vec<NodeTypeId> = catalog().iter().map(|n| n.id).collect();
        assert_eq!(ids.len(), 15);
        assert_eq!(CHANNEL_FEED_TRIGGER.to_string(), "795c3a4b-fb36-4ffc-943a-6c7bf4f3d99e");
        for (i, id) in ids.iter().enumerate() {
            assert!(!ids[i + 1..].contains(id), "duplicate id {id}");
        }
        assert_eq!(AI_AVATAR.to_string(), "b3b4c9e2-2a47-4fa9-8ce8-0c1fa1d7b6ef");
        assert_eq!(VIDEO_GENERATION.to_string(), "a2eb3ec2-da7a-4f97-94d2-a9a537548522");
        assert_eq!(AUDIO_GENERATION.to_string(), "14687f30-5fd0-468f-8239-2784d83df95b");
        assert_eq!(IMAGE_GENERATION.to_string(), "18b998a0-2ea7-4676-a5d3-3ae6c8ac0b72");
        for id in [AI_AVATAR, VIDEO_GENERATION, AUDIO_GENERATION, IMAGE_GENERATION] {
            assert_eq!(node_type(id).kind, NodeKind::Generation);
        }
        assert!(find(NodeTypeId::from_uuid(uuid::Uuid::nil())).is_none());
    }

    #[test]
    fn catalog_order_is_stable() {
        let order: Vec<NodeTypeId> = catalog().iter().map(|n| n.id).collect();
        assert_eq!(
            order,
            [
                SCHEDULE_TRIGGER,
                CHANNEL_FEED_TRIGGER,
                VIDEO_INPUT,
                CLIP,
                REFRAME,
                CAPTIONS,
                BACKGROUND_MUSIC,
                OVERLAY,
                SPEED,
                CONCATENATE,
                AI_AVATAR,
                VIDEO_GENERATION,
                AUDIO_GENERATION,
                IMAGE_GENERATION,
                DESTINATION,
            ]
        );
    }

    #[test]
    fn every_schema_compiles_and_is_a_closed_object_without_required() {
        for node_type in catalog() {
            let schema = &node_type.params_schema;
            assert!(jsonschema::validator_for(schema).is_ok(), "{}", node_type.name);
            assert_eq!(schema["type"], "object", "{}", node_type.name);
            assert_eq!(schema["additionalProperties"], false, "{}", node_type.name);
            assert!(schema.get("required").is_none(), "{}", node_type.name);
            assert!(node_type.validate_params(&Map::new()).is_ok(), "{} refuses {{}}", node_type.name);
        }
    }

    #[test]
    fn protection_follows_kind() {
        for node_type in catalog() {
            let expected = matches!(node_type.kind, NodeKind::Trigger | NodeKind::Input | NodeKind::Destination);
            assert_eq!(node_type.protected, expected, "{}", node_type.name);
        }
        assert!(node_type(VIDEO_INPUT).protected);
        assert!(node_type(DESTINATION).protected);
        assert!(node_type(SCHEDULE_TRIGGER).protected);
        assert!(!node_type(CLIP).protected);
    }

    #[test]
    fn good_params_pass() {
        let good = [
            (SCHEDULE_TRIGGER, json!({"cron": "*/15 9-17 * * MON-FRI", "timezone": "Europe/Paris"})),
            (SCHEDULE_TRIGGER, json!({"cron": "0 0 1,15 * *", "timezone": "Etc/GMT+5"})),
            (VIDEO_INPUT, json!({})),
            (CLIP, json!({"start_ms": 0, "end_ms": 5000})),
            (REFRAME, json!({"aspect_ratio": "9:16", "mode": "pad", "pad_color": "#00ff0A"})),
            (CAPTIONS, json!({"srt": "1\n00:00:00,000 --> 00:00:01,000\nHi\n"})),
            (
                CAPTIONS,
                json!({"caption_file_id": "6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01",
                       "style": {"font_size": 32, "color": "#FFFFFF", "position": "bottom"}}),
            ),
            (
                BACKGROUND_MUSIC,
                json!({"audio_id": "6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01", "volume": 0.3, "ducking": true}),
            ),
            (
                OVERLAY,
                json!({"image_id": "6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01", "position": "top_right",
                       "opacity": 0.5, "scale": 1}),
            ),
            (SPEED, json!({"factor": 0.25})),
            (SPEED, json!({"factor": 4})),
            (CONCATENATE, json!({})),
            (
                AI_AVATAR,
                json!({"avatar_profile_id": "6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01", "video_model": "expressive",
                       "single_take": false, "script": "Hello there."}),
            ),
            (
                VIDEO_GENERATION,
                json!({"prompt": "a cat", "model": "kling-2.1", "resolution": "1080p", "duration": "5",
                       "aspect_ratio": "16:9"}),
            ),
            (AUDIO_GENERATION, json!({"mode": "music", "music_prompt": "calm piano", "music_length_ms": 30000})),
            (IMAGE_GENERATION, json!({"prompt": "a logo", "image_size": "1536x1024", "quality": "high"})),
            (DESTINATION, json!({"name": "YouTube"})),
        ];
        for (id, value) in good {
            let node_type = node_type(id);
            assert_eq!(node_type.validate_params(&params(value.clone())), Ok(()), "{} {value}", node_type.name);
        }
    }

    #[test]
    fn unknown_parameter_is_refused_by_name() {
        let message = refusal(SPEED, json!({"factor": 2, "bogus": 1}));
        assert!(message.contains("params_used.bogus"), "{message}");
        let message = refusal(VIDEO_INPUT, json!({"anything": true}));
        assert!(message.contains("params_used.anything"), "{message}");
        let message = refusal(CAPTIONS, json!({"style": {"weight": "bold"}}));
        assert!(message.contains("params_used.style.weight"), "{message}");
        let mut long_name = Map::new();
        long_name.insert("k".repeat(10_000), json!(1));
        let message = node_type(SPEED).validate_params(&long_name).unwrap_err();
        assert!(message.starts_with("params_used.kkk") && message.len() < 200, "{message}");
    }

    #[test]
    fn wrong_type_is_refused_by_name() {
        let message = refusal(SPEED, json!({"factor": "fast"}));
        assert!(message.starts_with("params_used.factor: "), "{message}");
        assert!(message.contains("number"), "{message}");
    }

    #[test]
    fn out_of_range_factor_is_refused_by_name() {
        let message = refusal(SPEED, json!({"factor": 5}));
        assert_eq!(message, "params_used.factor: 5 is greater than the maximum of 4");
        let message = refusal(SPEED, json!({"factor": 0.1}));
        assert!(message.starts_with("params_used.factor: 0.1 is less than the minimum of 0.25"), "{message}");
    }

    #[test]
    fn four_k_needs_the_right_model_family() {
        let message = refusal(VIDEO_GENERATION, json!({"resolution": "4k", "model": "kling-2.1-pro"}));
        assert!(message.starts_with("params_used.model: "), "{message}");
        assert!(message.contains("4k"), "{message}");
        for model in MODELS_WITH_4K {
            let ok = node_type(VIDEO_GENERATION).validate_params(&params(json!({"resolution": "4k", "model": model})));
            assert_eq!(ok, Ok(()), "{model}");
        }
        let ok =
            node_type(VIDEO_GENERATION).validate_params(&params(json!({"resolution": "1080p", "model": "kling-2.1"})));
        assert_eq!(ok, Ok(()));
    }

    #[test]
    fn fractional_music_length_is_refused_by_name() {
        let message = refusal(AUDIO_GENERATION, json!({"music_length_ms": 1.5}));
        assert!(message.starts_with("params_used.music_length_ms: "), "{message}");
        assert!(message.contains("integer"), "{message}");
    }

    #[test]
    fn patterns_are_anchored() {
        let message = refusal(REFRAME, json!({"pad_color": "#ffffff00"}));
        assert!(message.starts_with("params_used.pad_color: "), "{message}");
        let message = refusal(OVERLAY, json!({"image_id": "x6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01"}));
        assert!(message.starts_with("params_used.image_id: "), "{message}");
        let message = refusal(SCHEDULE_TRIGGER, json!({"cron": "* * * *"}));
        assert!(message.starts_with("params_used.cron: "), "{message}");
        let message = refusal(SCHEDULE_TRIGGER, json!({"cron": "* * * * * *"}));
        assert!(message.starts_with("params_used.cron: "), "{message}");
        let message = refusal(OVERLAY, json!({"scale": 0}));
        assert!(message.starts_with("params_used.scale: "), "{message}");
    }

    #[test]
    fn pattern_errors_say_what_was_expected() {
        let message = refusal(CAPTIONS, json!({"style": {"color": "red"}}));
        assert_eq!(message, "params_used.style.color: \"red\" is not a colour written as #RRGGBB");
        let message = refusal(SCHEDULE_TRIGGER, json!({"cron": "every day"}));
        assert!(message.starts_with("params_used.cron: \"every day\" is not a five-field cron"), "{message}");
        let message = refusal(BACKGROUND_MUSIC, json!({"audio_id": "x".repeat(500)}));
        assert_eq!(message, "params_used.audio_id: a string of 500 characters is not a UUID");
    }

    #[test]
    fn captions_take_at_most_one_source() {
        let both = json!({"srt": "x", "caption_file_id": "6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01"});
        let message = refusal(CAPTIONS, both);
        assert_eq!(message, "params_used: srt and caption_file_id may not both be set");
    }

    #[test]
    fn long_values_are_not_echoed() {
        let message = refusal(CAPTIONS, json!({"srt": "a".repeat(100_001)}));
        assert!(message.starts_with("params_used.srt: "), "{message}");
        assert!(message.len() < 200, "{message}");
    }

    #[test]
    fn deeply_nested_values_are_refused_without_panicking() {
        let message = refusal(CAPTIONS, json!({"style": nested_arrays(200)}));
        assert!(message.starts_with("params_used.style: "), "{message}");
        let message = refusal(CAPTIONS, json!({"style": {"font_size": nested_arrays(200)}}));
        assert!(message.starts_with("params_used.style.font_size: "), "{message}");
        let message = refusal(CAPTIONS, json!({"style": {"deep": nested_arrays(200)}}));
        assert!(message.contains("params_used.style.deep"), "{message}");
        assert!(message.len() < 200, "{message}");
    }

    #[test]
    fn four_k_costs_twice_as_much() {
        let video = node_type(VIDEO_GENERATION);
        let hd = video.credits_for(&params(json!({"resolution": "1080p"})), 8.0);
        let uhd = video.credits_for(&params(json!({"resolution": "4k"})), 8.0);
        assert_eq!(hd, 160);
        assert_eq!(uhd, 2 * hd);
    }

    #[test]
    fn credits_follow_the_unit() {
        assert_eq!(node_type(CLIP).credits_for(&Map::new(), 30.0), 0);
        assert_eq!(node_type(AI_AVATAR).credits_for(&Map::new(), 2.1), 30);
        assert_eq!(node_type(AI_AVATAR).credits_for(&Map::new(), f64::NAN), 0);
        assert_eq!(node_type(AI_AVATAR).credits_for(&Map::new(), -3.0), 0);
        assert_eq!(node_type(AI_AVATAR).credits_for(&Map::new(), f64::INFINITY), u64::MAX);
        let image = node_type(IMAGE_GENERATION);
        assert_eq!(image.credits_for(&params(json!({"quality": "low"})), 0.0), 4);
        assert_eq!(image.credits_for(&params(json!({"quality": "high"})), 99.0), 16);
    }

    #[test]
    fn connections_follow_the_kind() {
        for node_type in catalog() {
            let (inputs, outputs) = match node_type.kind {
                NodeKind::Trigger | NodeKind::Input => (false, true),
                NodeKind::Edit | NodeKind::Generation => (true, true),
                NodeKind::Destination => (true, false),
            };
            assert_eq!(node_type.accepts_inputs(), inputs, "{}", node_type.name);
            assert_eq!(node_type.has_outputs(), outputs, "{}", node_type.name);
        }
    }

    #[test]
    fn serializes_for_the_api() {
        let value = serde_json::to_value(node_type(VIDEO_GENERATION)).unwrap();
        assert_eq!(value["id"], "a2eb3ec2-da7a-4f97-94d2-a9a537548522");
        assert_eq!(value["kind"], "generation");
        assert_eq!(value["protected"], false);
        assert_eq!(value["credit_cost"]["unit"], "per_output_second");
        assert_eq!(value["credit_cost"]["multipliers"][0], json!({"param": "resolution", "equals": "4k", "factor": 2}));
        assert!(value.get("validator").is_none());
        let value = serde_json::to_value(node_type(CLIP)).unwrap();
        assert_eq!(value["credit_cost"], json!({"unit": "free", "credits": 0}));
    }
}
