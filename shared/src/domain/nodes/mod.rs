//! The node types: every kind of node a workflow graph may contain. Each node type is one
//! module of this folder with its catalog entry (ID, name, kind, parameter schema, price),
//! its typed parameters (parsed once, defaults in one place) and what the engine needs
//! from it (the uploads it reads, the edit it contributes to a render, its scratch files,
//! its timeline placement). The planner, the worker and the timeline ask the node type;
//! they never compare IDs. Adding a node type: a module here and one line in [`TILES`].

mod ai_avatar;
mod audio_generation;
pub mod background_music;
pub mod captions;
mod channel_feed;
pub mod clip;
mod concatenate;
mod destination;
mod image_generation;
mod messages;
pub mod overlay;
pub mod placement;
pub mod reframe;
mod schedule;
mod schema;
pub mod speed;
mod tile;
mod video_generation;
mod video_input;

use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

pub use self::tile::*;
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

/// The whole catalog, in the order of [`TILES`].
pub fn catalog() -> &'static [NodeType] {
    static CATALOG: OnceLock<Vec<NodeType>> = OnceLock::new();
    CATALOG.get_or_init(|| TILES.iter().map(|node_type| node_type()).collect())
}

/// The node type with this id, if there is one.
pub fn find(id: NodeTypeId) -> Option<&'static NodeType> {
    catalog().iter().find(|node_type| node_type.id == id)
}

/// A node's type as a graph, a run or a trigger shows it: by ID and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "A node's type, by ID and name.")]
pub struct NodeTypeRef {
    #[schema(value_type = uuid::Uuid)]
    pub node_type_id: NodeTypeId,
    pub node_type_name: &'static str,
}

impl NodeTypeRef {
    /// The type `id` with its catalog name; `unknown` for an ID the catalog lacks.
    pub fn of(id: NodeTypeId) -> Self {
        Self { node_type_id: id, node_type_name: find(id).map_or("unknown", |node_type| node_type.name) }
    }
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
