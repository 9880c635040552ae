//! The catalog's contents: every node type with its parameter schema and price.

use serde_json::{json, Value};

use super::*;

/// Identifiers are referenced by their canonical text; JSON Schema `format` is only an
/// annotation in draft 2020-12, so a pattern is what actually enforces the shape.
const UUID_PATTERN: &str = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
/// A colour as ffmpeg's filters accept it without any name lookup.
const HEX_COLOR_PATTERN: &str = "^#[0-9a-fA-F]{6}$";
/// IANA zone names ("Europe/Paris", "Etc/GMT+5"); whether the zone exists is checked when scheduling.
const TIMEZONE_PATTERN: &str = "^[A-Za-z][A-Za-z0-9_+\\-/]*$";
/// Video Generation models that can render 4k; the others stop at 1080p.
pub(super) const MODELS_WITH_4K: [&str; 2] = ["veo-3", "veo-3-fast"];

/// A parameter schema: an object with exactly these optional properties.
/// Nothing is `required` because graphs are built one step at a time; whether a node has
/// everything it needs is checked when a run starts.
fn params_schema(description: &str, properties: Value, rules: Value) -> Value {
    let mut schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "description": description,
        "type": "object",
        "properties": properties,
        "additionalProperties": false,
    });
    if rules.as_array().is_some_and(|rules| !rules.is_empty()) {
        schema["allOf"] = rules;
    }
    schema
}

// Descriptions of patterned strings complete the sentence "<value> is not …" in error messages.

fn uuid_string() -> Value {
    json!({"type": "string", "pattern": UUID_PATTERN, "description": "a UUID"})
}

fn hex_color() -> Value {
    json!({"type": "string", "pattern": HEX_COLOR_PATTERN, "description": "a colour written as #RRGGBB"})
}

/// Five space-separated cron fields (minute hour day-of-month month day-of-week), each a list of
/// `*`, numbers, three-letter names or ranges, with an optional step. Field ranges (minute ≤ 59…)
/// are checked when the schedule is registered, which knows the exact cron dialect.
fn cron_pattern() -> String {
    let value = "(?:[0-9]{1,2}|[A-Za-z]{3})";
    let item = format!("(?:\\*|{value}(?:-{value})?)(?:/[0-9]{{1,2}})?");
    let field = format!("{item}(?:,{item})*");
    format!("^{field} {field} {field} {field} {field}$")
}

fn node(id: NodeTypeId, name: &'static str, kind: NodeKind, schema: Value, credit_cost: CreditCost) -> NodeType {
    // The schemas are constants written in this file and every one is compiled by the unit
    // tests, so a failure here is a programming error that cannot depend on input.
    let validator = jsonschema::validator_for(&schema)
        .unwrap_or_else(|error| panic!("node type {name} has an invalid params schema: {error}"));
    // Triggers, inputs and destinations decide where a run comes from and goes to; letting a
    // run rewrite them would redirect it.
    let protected = matches!(kind, NodeKind::Trigger | NodeKind::Input | NodeKind::Destination);
    NodeType { id, name, kind, protected, params_schema: schema, credit_cost, validator }
}

/// Builds every node type, in the catalog's documented order.
pub(super) fn build() -> Vec<NodeType> {
    let no_rules = json!([]);
    vec![
        node(
            SCHEDULE_TRIGGER,
            "Schedule",
            NodeKind::Trigger,
            params_schema(
                "Starts a run on a cron schedule.",
                json!({
                    "cron": {
                        "type": "string",
                        "maxLength": 120,
                        "pattern": cron_pattern(),
                        "description": "a five-field cron expression (minute hour day-of-month month day-of-week)",
                    },
                    "timezone": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 64,
                        "pattern": TIMEZONE_PATTERN,
                        "description": "an IANA time zone name such as Europe/Paris",
                    },
                }),
                no_rules.clone(),
            ),
            CreditCost::free(),
        ),
        node(
            VIDEO_INPUT,
            "Video Input",
            NodeKind::Input,
            params_schema("The video a run is started with; it takes no parameters.", json!({}), no_rules.clone()),
            CreditCost::free(),
        ),
        node(
            CLIP,
            "Clip",
            NodeKind::Edit,
            params_schema(
                // A schema cannot compare two properties, so end_ms > start_ms (and end_ms within
                // the media) is checked at run time, when the input's duration is known.
                "Keeps the range from start_ms to end_ms of its input; end_ms must be after start_ms.",
                json!({
                    "start_ms": {"type": "integer", "minimum": 0},
                    "end_ms": {"type": "integer", "minimum": 1},
                }),
                no_rules.clone(),
            ),
            CreditCost::free(),
        ),
        node(
            REFRAME,
            "Reframe",
            NodeKind::Edit,
            params_schema(
                "Changes the aspect ratio by cropping the picture or padding it with pad_color.",
                json!({
                    "aspect_ratio": {"type": "string", "enum": ["16:9", "9:16", "1:1", "4:5"]},
                    "mode": {"type": "string", "enum": ["crop", "pad"]},
                    "pad_color": hex_color(),
                }),
                no_rules.clone(),
            ),
            CreditCost::per_output_second(1, Vec::new()),
        ),
        node(
            CAPTIONS,
            "Captions",
            NodeKind::Edit,
            params_schema(
                "Burns subtitles into the picture, from inline SRT text or an uploaded caption file.",
                json!({
                    "srt": {"type": "string", "maxLength": 100_000},
                    "caption_file_id": uuid_string(),
                    "style": {
                        "type": "object",
                        "properties": {
                            "font_size": {"type": "integer", "minimum": 8, "maximum": 200},
                            "color": hex_color(),
                            "position": {"type": "string", "enum": ["bottom", "top", "center"]},
                        },
                        "additionalProperties": false,
                    },
                }),
                // Neither is allowed while the graph is being built; giving both would leave it
                // ambiguous which captions to burn, so that is refused outright.
                json!([{
                    "description": "srt and caption_file_id may not both be set",
                    "not": {"required": ["srt", "caption_file_id"]},
                }]),
            ),
            CreditCost::per_output_second(1, Vec::new()),
        ),
        node(
            BACKGROUND_MUSIC,
            "Background Music",
            NodeKind::Edit,
            params_schema(
                "Mixes an uploaded audio track under the video's sound; volume 1 is unchanged, ducking lowers it under speech.",
                json!({
                    "audio_id": uuid_string(),
                    "volume": {"type": "number", "minimum": 0, "maximum": 2},
                    "ducking": {"type": "boolean"},
                }),
                no_rules.clone(),
            ),
            CreditCost::per_output_second(1, Vec::new()),
        ),
        node(
            OVERLAY,
            "Overlay",
            NodeKind::Edit,
            params_schema(
                "Places an uploaded image (e.g. a watermark) over the video; scale is its width as a fraction of the video's.",
                json!({
                    "image_id": uuid_string(),
                    "position": {
                        "type": "string",
                        "enum": ["top_left", "top_right", "bottom_left", "bottom_right", "center"],
                    },
                    "opacity": {"type": "number", "minimum": 0, "maximum": 1},
                    "scale": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                }),
                no_rules.clone(),
            ),
            CreditCost::per_output_second(1, Vec::new()),
        ),
        node(
            SPEED,
            "Speed",
            NodeKind::Edit,
            params_schema(
                // ffmpeg's atempo filter handles 0.5..=2 per pass; the executor chains passes,
                // and beyond 0.25..=4 the audio becomes unusable.
                "Plays the video faster (factor > 1) or slower (factor < 1).",
                json!({"factor": {"type": "number", "minimum": 0.25, "maximum": 4}}),
                no_rules.clone(),
            ),
            CreditCost::per_output_second(1, Vec::new()),
        ),
        node(
            CONCATENATE,
            "Concatenate",
            NodeKind::Edit,
            params_schema(
                "Joins its inputs end to end, in the order they were connected; it takes no parameters.",
                json!({}),
                no_rules.clone(),
            ),
            CreditCost::free(),
        ),
        node(
            AI_AVATAR,
            "AI Avatar",
            NodeKind::Generation,
            params_schema(
                "A talking avatar reading a script.",
                json!({
                    "avatar_profile_id": uuid_string(),
                    "video_model": {"type": "string", "enum": ["standard", "expressive"]},
                    "single_take": {"type": "boolean"},
                    "script": {"type": "string", "minLength": 1, "maxLength": 10_000},
                }),
                no_rules.clone(),
            ),
            CreditCost::per_output_second(10, Vec::new()),
        ),
        node(
            VIDEO_GENERATION,
            "Video Generation",
            NodeKind::Generation,
            params_schema(
                "Generates a video clip from a text prompt.",
                json!({
                    "prompt": {"type": "string", "minLength": 1, "maxLength": 4000},
                    "model": {"type": "string", "enum": ["veo-3", "veo-3-fast", "kling-2.1", "kling-2.1-pro"]},
                    "resolution": {"type": "string", "enum": ["480p", "720p", "1080p", "4k"]},
                    // A string because the contract carries it as one.
                    "duration": {"type": "string", "enum": ["5", "8", "10"]},
                    "aspect_ratio": {"type": "string", "enum": ["16:9", "9:16", "1:1"]},
                }),
                // A missing model passes here like any missing parameter; the run-time
                // completeness check catches it before a model is chosen.
                json!([{
                    "description": "resolution \"4k\" is only available with the veo models",
                    "if": {"properties": {"resolution": {"const": "4k"}}, "required": ["resolution"]},
                    "then": {"properties": {"model": {"enum": MODELS_WITH_4K}}},
                }]),
            ),
            CreditCost::per_output_second(20, vec![multiplier("resolution", "4k", 2)]),
        ),
        node(
            AUDIO_GENERATION,
            "Audio Generation",
            NodeKind::Generation,
            params_schema(
                "Generates music or a sound effect from a text prompt.",
                json!({
                    "mode": {"type": "string", "enum": ["music", "sound_effect"]},
                    "music_prompt": {"type": "string", "minLength": 1, "maxLength": 2000},
                    "music_length_ms": {"type": "integer", "minimum": 1000, "maximum": 300_000},
                }),
                no_rules.clone(),
            ),
            CreditCost::per_output_second(1, Vec::new()),
        ),
        node(
            IMAGE_GENERATION,
            "Image Generation",
            NodeKind::Generation,
            params_schema(
                "Generates an image from a text prompt.",
                json!({
                    "prompt": {"type": "string", "minLength": 1, "maxLength": 4000},
                    "image_size": {"type": "string", "enum": ["1024x1024", "1024x1536", "1536x1024"]},
                    "quality": {"type": "string", "enum": ["low", "medium", "high"]},
                }),
                no_rules.clone(),
            ),
            CreditCost::per_run(4, vec![multiplier("quality", "medium", 2), multiplier("quality", "high", 4)]),
        ),
        node(
            DESTINATION,
            "Destination",
            NodeKind::Destination,
            params_schema(
                "Receives the finished video.",
                json!({"name": {"type": "string", "maxLength": 200}}),
                no_rules,
            ),
            CreditCost::free(),
        ),
    ]
}
