//! The node-type catalog: every kind of node a workflow graph may contain, with its parameter
//! schema and price, kept as data in one place so that validation, billing and the API all agree.

mod catalog;
mod messages;

use std::sync::OnceLock;

use jsonschema::Validator;
use serde::Serialize;
use serde_json::{Map, Value};
use uuid::uuid;

use messages::{describe_error, MAX_MESSAGES};

crate::typed_id!(
    /// Identifies a node type of the catalog; the IDs never change once published.
    NodeTypeId
);

/// AI Avatar: a talking avatar reading a script (fixed by the contract).
pub const AI_AVATAR: NodeTypeId = NodeTypeId::from_uuid(uuid!("b3b4c9e2-2a47-4fa9-8ce8-0c1fa1d7b6ef"));
/// Video Generation: text-to-video (fixed by the contract).
pub const VIDEO_GENERATION: NodeTypeId = NodeTypeId::from_uuid(uuid!("a2eb3ec2-da7a-4f97-94d2-a9a537548522"));
/// Audio Generation: music or sound effects (fixed by the contract).
pub const AUDIO_GENERATION: NodeTypeId = NodeTypeId::from_uuid(uuid!("14687f30-5fd0-468f-8239-2784d83df95b"));
/// Image Generation: text-to-image (fixed by the contract).
pub const IMAGE_GENERATION: NodeTypeId = NodeTypeId::from_uuid(uuid!("18b998a0-2ea7-4676-a5d3-3ae6c8ac0b72"));
/// Video Input: the video a run is started with.
pub const VIDEO_INPUT: NodeTypeId = NodeTypeId::from_uuid(uuid!("87a28532-ca1d-4652-9a23-a5b9d452e79a"));
/// Destination: where a finished video is delivered.
pub const DESTINATION: NodeTypeId = NodeTypeId::from_uuid(uuid!("96600cea-d346-4a43-a262-cc54579cfe1e"));
/// Schedule trigger: starts runs on a cron schedule.
pub const SCHEDULE_TRIGGER: NodeTypeId = NodeTypeId::from_uuid(uuid!("ca4a4af1-9622-4018-ae48-a107c46bd14b"));
/// Clip: keeps one time range of its input.
pub const CLIP: NodeTypeId = NodeTypeId::from_uuid(uuid!("774577c0-7d6c-42fa-9f2d-fbc179081641"));
/// Reframe: changes the aspect ratio by cropping or padding.
pub const REFRAME: NodeTypeId = NodeTypeId::from_uuid(uuid!("3c86da6e-c0b0-4ac6-a4e3-23ff638dceae"));
/// Captions: burns subtitles into the picture.
pub const CAPTIONS: NodeTypeId = NodeTypeId::from_uuid(uuid!("d4ad2388-2f79-4d9c-9cb1-b953460ffedb"));
/// Background music: mixes an audio track under the video's sound.
pub const BACKGROUND_MUSIC: NodeTypeId = NodeTypeId::from_uuid(uuid!("e1da61bb-803c-4518-8c72-3794867512a7"));
/// Overlay: places an image (e.g. a watermark) over the video.
pub const OVERLAY: NodeTypeId = NodeTypeId::from_uuid(uuid!("5aa5e31c-34be-4cd1-b618-7a7544f6e4c0"));
/// Speed: plays the video faster or slower.
pub const SPEED: NodeTypeId = NodeTypeId::from_uuid(uuid!("47a6bc12-618b-47a6-b0ad-7b3983640b2d"));
/// Concatenate: joins its inputs end to end, in the order they were connected.
pub const CONCATENATE: NodeTypeId = NodeTypeId::from_uuid(uuid!("2d56a739-616f-497a-b979-cee33ec9b857"));

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

/// One entry of the catalog.
#[derive(Debug, Serialize)]
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
    #[serde(skip)]
    validator: Validator,
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

/// The whole catalog, in this stable order: the schedule trigger, Video Input, the seven edits
/// (clip, reframe, captions, background music, overlay, speed, concatenate), the four
/// generations (AI avatar, video, audio, image), then Destination.
pub fn catalog() -> &'static [NodeType] {
    static CATALOG: OnceLock<Vec<NodeType>> = OnceLock::new();
    CATALOG.get_or_init(catalog::build)
}

/// The node type with this id, if there is one.
pub fn find(id: NodeTypeId) -> Option<&'static NodeType> {
    catalog().iter().find(|node_type| node_type.id == id)
}

impl NodeType {
    /// Checks params against the schema; Err holds a message naming the parameter, e.g. "params_used.speed: 5.0 is greater than the maximum of 4"
    pub fn validate_params(&self, params: &Map<String, Value>) -> Result<(), String> {
        // The validator reads a `Value`; parameter maps are small, so one copy is cheap.
        let instance = Value::Object(params.clone());
        let mut messages: Vec<String> = Vec::new();
        for error in self.validator.iter_errors(&instance) {
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

    use super::catalog::MODELS_WITH_4K;
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
        assert_eq!(ids.len(), 14);
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
