//! Parsing `POST /agent/{id}/run`: the input forms and rules 1–9 of the contract that
//! can be checked on the body alone. Every refusal names the field and the problem.

use serde_json::{Map, Value};

use super::{MediaId, MAX_INPUTS};
use crate::core::json;
use crate::core::ssrf::MAX_URL_CHARS;
use crate::domain::asset_manager::Artifact;
use crate::domain::ids::AgentNodeId;
use crate::domain::ids::AssetItemId;
use crate::domain::ids::UploadId;

/// Properties the body may have.
const FIELDS: &[&str] = &[
    "video_inputs",
    "video_ids",
    "node_render_ids",
    "video_urls",
    "input_clip_start_ms",
    "input_clip_end_ms",
    "video_id_inputs",
    "node_render_inputs",
    "video_url_inputs",
    "youtube_url_inputs",
    "asset_manager_assets",
    "callback_url",
    "update_params",
    "ignore_nodes",
];
/// The input arrays, at the top level or in a `video_inputs` entry.
const INPUT_FIELDS: &[&str] = &[
    "video_ids",
    "node_render_ids",
    "video_urls",
    "video_id_inputs",
    "node_render_inputs",
    "video_url_inputs",
    "youtube_url_inputs",
    "asset_manager_assets",
];
/// Latest clip offset accepted: the longest input (5 hours).
pub const MAX_CLIP_MS: u64 = 5 * 60 * 60 * 1000;

/// What a bound input refers to.
#[derive(Clone, Debug, PartialEq)]
pub enum InputRef {
    Upload(UploadId),
    Render(MediaId),
    Url(String),
    /// A video-sharing site's page (`youtube_url_inputs`), read with yt-dlp.
    Site(String),
    /// An item of the workspace's asset manager, in the file `artifact` asks for.
    Asset {
        id: AssetItemId,
        artifact: Artifact,
    },
}

/// One input with its clip window.
#[derive(Clone, Debug, PartialEq)]
pub struct InputItem {
    pub reference: InputRef,
    pub clip_start_ms: Option<u64>,
    pub clip_end_ms: Option<u64>,
    /// Where it was given, for messages: `video_ids[2]`, `video_inputs[0].video_url_inputs[1]`.
    pub field: String,
}

/// How the inputs were given.
#[derive(Clone, Debug, PartialEq)]
pub enum Inputs {
    /// None at all (a generation-only workflow).
    None,
    /// The single-input shorthand.
    TopLevel(Vec<InputItem>),
    /// One entry per Video Input tile.
    PerTile(Vec<(AgentNodeId, Vec<InputItem>)>),
}

/// A parsed start request.
#[derive(Clone, Debug, PartialEq)]
pub struct StartRequest {
    pub inputs: Inputs,
    pub update_params: Vec<(AgentNodeId, Map<String, Value>)>,
    pub ignore_nodes: Vec<AgentNodeId>,
    pub callback_url: Option<String>,
}

type Parsed<T> = Result<T, String>;
/// Reads one input reference given as text in the named field.
type RefParser = fn(&str, &str) -> Parsed<InputRef>;

impl StartRequest {
    pub fn parse(body: &Map<String, Value>) -> Parsed<Self> {
        if let Some(unknown) = json::unknown_property(body, FIELDS) {
            return Err(unknown);
        }
        let top_level = INPUT_FIELDS.iter().any(|field| body.contains_key(*field));
        let inputs = match (body.get("video_inputs"), top_level) {
            (Some(_), true) => {
                return Err("use either video_inputs or the top-level input arrays (video_ids, node_render_ids, \
                            video_urls, ...), not both"
                    .into())
            }
            (Some(entries), false) => {
                if body.contains_key("input_clip_start_ms") || body.contains_key("input_clip_end_ms") {
                    return Err("input_clip_start_ms and input_clip_end_ms apply to the top-level input arrays; \
                                with video_inputs, give them in each entry"
                        .into());
                }
                Inputs::PerTile(per_tile(entries)?)
            }
            (None, true) => Inputs::TopLevel(items_of(body, "", window(body, "")?)?),
            (None, false) => {
                if body.contains_key("input_clip_start_ms") || body.contains_key("input_clip_end_ms") {
                    return Err("input_clip_start_ms and input_clip_end_ms were given without any input".into());
                }
                Inputs::None
            }
        };
        let count = match &inputs {
            Inputs::None => 0,
            Inputs::TopLevel(items) => items.len(),
            Inputs::PerTile(entries) => entries.iter().map(|(_, items)| items.len()).sum(),
        };
        if count > MAX_INPUTS {
            return Err(format!("a run may have at most {MAX_INPUTS} input videos; this request has {count}"));
        }
        Ok(Self {
            inputs,
            update_params: update_params(body.get("update_params"))?,
            ignore_nodes: ignore_nodes(body.get("ignore_nodes"))?,
            callback_url: callback_url(body.get("callback_url"))?,
        })
    }
}

fn per_tile(entries: &Value) -> Parsed<Vec<(AgentNodeId, Vec<InputItem>)>> {
    let Value::Array(entries) = entries else { return Err("video_inputs must be an array of objects".into()) };
    if entries.is_empty() {
        return Err("video_inputs must have at least one entry".into());
    }
    if entries.len() > MAX_INPUTS {
        return Err(format!("video_inputs may have at most {MAX_INPUTS} entries"));
    }
    let mut tiles: Vec<(AgentNodeId, Vec<InputItem>)> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let prefix = format!("video_inputs[{index}]");
        let Value::Object(entry) = entry else { return Err(format!("{prefix} must be an object")) };
        let allowed: Vec<&str> = ["agent_node_id", "input_clip_start_ms", "input_clip_end_ms"]
            .into_iter()
            .chain(INPUT_FIELDS.iter().copied())
            .collect();
        if let Some(unknown) = json::unknown_property_at(&prefix, entry, &allowed) {
            return Err(unknown);
        }
        let node = match entry.get("agent_node_id") {
            Some(Value::String(text)) => AgentNodeId::parse(text)
                .ok_or_else(|| format!("{prefix}.agent_node_id must be a UUID, got {text:?}"))?,
            Some(_) => return Err(format!("{prefix}.agent_node_id must be a string")),
            None => return Err(format!("{prefix}.agent_node_id is required")),
        };
        if tiles.iter().any(|(tile, _)| *tile == node) {
            return Err(format!("{prefix}: video_inputs has more than one entry for agent_node_id {node}"));
        }
        let items = items_of(entry, &format!("{prefix}."), window(entry, &format!("{prefix}."))?)?;
        if items.is_empty() {
            return Err(format!(
                "{prefix} needs at least one of video_ids, node_render_ids, video_urls, youtube_url_inputs, \
                 asset_manager_assets or the per-item forms"
            ));
        }
        tiles.push((node, items));
    }
    Ok(tiles)
}

/// A clip window of an object (top level, entry or item); end must follow start.
fn window(object: &Map<String, Value>, prefix: &str) -> Parsed<(Option<u64>, Option<u64>)> {
    let start = offset(object, "input_clip_start_ms", prefix)?;
    let end = offset(object, "input_clip_end_ms", prefix)?;
    if let (Some(start), Some(end)) = (start, end) {
        if end <= start {
            return Err(format!(
                "{prefix}input_clip_end_ms ({end}) must be greater than {prefix}input_clip_start_ms ({start})"
            ));
        }
    }
    if end == Some(0) {
        return Err(format!("{prefix}input_clip_end_ms must be greater than 0"));
    }
    Ok((start, end))
}

fn offset(object: &Map<String, Value>, name: &str, prefix: &str) -> Parsed<Option<u64>> {
    match object.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(ms) if ms <= MAX_CLIP_MS => Ok(Some(ms)),
            Some(_) => Err(format!("{prefix}{name} must be at most {MAX_CLIP_MS} (5 hours)")),
            None => Err(format!("{prefix}{name} must be a non-negative integer (milliseconds)")),
        },
    }
}

/// The inputs of an object (the body or a `video_inputs` entry), plain arrays first,
/// then the per-item forms; plain arrays take the object's window, items their own
/// (falling back to the object's).
fn items_of(object: &Map<String, Value>, prefix: &str, window: (Option<u64>, Option<u64>)) -> Parsed<Vec<InputItem>> {
    let mut items = Vec::new();
    let plain: [(&str, RefParser); 3] =
        [("video_ids", upload_ref), ("node_render_ids", render_ref), ("video_urls", url_ref)];
    for (name, reference) in plain {
        let Some(value) = object.get(name) else { continue };
        let Value::Array(values) = value else { return Err(format!("{prefix}{name} must be an array of strings")) };
        if values.len() > MAX_INPUTS {
            return Err(format!("{prefix}{name} may have at most {MAX_INPUTS} items; it has {}", values.len()));
        }
        for (index, value) in values.iter().enumerate() {
            let field = format!("{prefix}{name}[{index}]");
            let Value::String(text) = value else { return Err(format!("{field} must be a string")) };
            items.push(InputItem {
                reference: reference(text, &field)?,
                clip_start_ms: window.0,
                clip_end_ms: window.1,
                field,
            });
        }
    }
    let per_item: [(&str, &str, RefParser); 4] = [
        ("video_id_inputs", "id", upload_ref),
        ("node_render_inputs", "id", render_ref),
        ("video_url_inputs", "url", url_ref),
        ("youtube_url_inputs", "url", site_ref),
    ];
    for (name, key, reference) in per_item {
        let Some(value) = object.get(name) else { continue };
        let Value::Array(values) = value else { return Err(format!("{prefix}{name} must be an array of objects")) };
        if values.len() > MAX_INPUTS {
            return Err(format!("{prefix}{name} may have at most {MAX_INPUTS} items; it has {}", values.len()));
        }
        for (index, value) in values.iter().enumerate() {
            let field = format!("{prefix}{name}[{index}]");
            let Value::Object(item) = value else { return Err(format!("{field} must be an object")) };
            if let Some(unknown) =
                json::unknown_property_at(&field, item, &[key, "input_clip_start_ms", "input_clip_end_ms"])
            {
                return Err(unknown);
            }
            let text = match item.get(key) {
                Some(Value::String(text)) => text,
                Some(_) => return Err(format!("{field}.{key} must be a string")),
                None => return Err(format!("{field}.{key} is required")),
            };
            let (start, end) = item_window(item, &field, window)?;
            items.push(InputItem {
                reference: reference(text, &format!("{field}.{key}"))?,
                clip_start_ms: start,
                clip_end_ms: end,
                field,
            });
        }
    }
    if let Some(value) = object.get("asset_manager_assets") {
        items.extend(asset_items(value, prefix, window)?);
    }
    Ok(items)
}

/// `asset_manager_assets`: items `{ id, artifact (highres, proxy, auto; default
/// highres), input_clip_start_ms, input_clip_end_ms }`.
fn asset_items(value: &Value, prefix: &str, window: (Option<u64>, Option<u64>)) -> Parsed<Vec<InputItem>> {
    let name = "asset_manager_assets";
    let Value::Array(values) = value else { return Err(format!("{prefix}{name} must be an array of objects")) };
    if values.len() > MAX_INPUTS {
        return Err(format!("{prefix}{name} may have at most {MAX_INPUTS} items; it has {}", values.len()));
    }
    let mut items = Vec::new();
    for (index, value) in values.iter().enumerate() {
        let field = format!("{prefix}{name}[{index}]");
        let Value::Object(item) = value else { return Err(format!("{field} must be an object")) };
        let known = ["id", "artifact", "input_clip_start_ms", "input_clip_end_ms"];
        if let Some(unknown) = json::unknown_property_at(&field, item, &known) {
            return Err(unknown);
        }
        let id = match item.get("id") {
            Some(Value::String(text)) => AssetItemId::parse(text)
                .ok_or_else(|| format!("{field}.id must be the UUID of the external item, got {text:?}"))?,
            Some(_) => return Err(format!("{field}.id must be a string")),
            None => return Err(format!("{field}.id is required")),
        };
        let artifact = match item.get("artifact") {
            None | Some(Value::Null) => Artifact::Highres,
            Some(Value::String(text)) => Artifact::parse(text)
                .ok_or_else(|| format!("{field}.artifact must be highres, proxy or auto, got {text:?}"))?,
            Some(_) => return Err(format!("{field}.artifact must be a string")),
        };
        let (start, end) = item_window(item, &field, window)?;
        items.push(InputItem {
            reference: InputRef::Asset { id, artifact },
            clip_start_ms: start,
            clip_end_ms: end,
            field,
        });
    }
    Ok(items)
}

/// A per-item form's window: its own offsets, else those of the object it is in; end
/// must follow start.
fn item_window(
    item: &Map<String, Value>,
    field: &str,
    outer: (Option<u64>, Option<u64>),
) -> Parsed<(Option<u64>, Option<u64>)> {
    let own = window(item, &format!("{field}."))?;
    let (start, end) = (own.0.or(outer.0), own.1.or(outer.1));
    if let (Some(start), Some(end)) = (start, end) {
        if end <= start {
            return Err(format!("{field}: the clip end ({end} ms) must be greater than its start ({start} ms)"));
        }
    }
    Ok((start, end))
}

fn upload_ref(text: &str, field: &str) -> Parsed<InputRef> {
    UploadId::parse(text).map(InputRef::Upload).ok_or_else(|| format!("{field} must be a video UUID, got {text:?}"))
}

fn render_ref(text: &str, field: &str) -> Parsed<InputRef> {
    MediaId::parse(text).map(InputRef::Render).ok_or_else(|| format!("{field} must be a render UUID, got {text:?}"))
}

fn url_ref(text: &str, field: &str) -> Parsed<InputRef> {
    check_url(text, field)?;
    Ok(InputRef::Url(text.to_owned()))
}

fn site_ref(text: &str, field: &str) -> Parsed<InputRef> {
    check_url(text, field)?;
    Ok(InputRef::Site(text.to_owned()))
}

/// An absolute http(s) URL with a host, of reasonable length.
pub fn check_url(text: &str, field: &str) -> Parsed<()> {
    if text.len() > MAX_URL_CHARS {
        return Err(format!("{field} must be at most {MAX_URL_CHARS} characters"));
    }
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"))
        .ok_or_else(|| format!("{field} must be an http:// or https:// URL, got {text:?}"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if host.is_empty() || text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{field} is not a valid URL: {text:?}"));
    }
    Ok(())
}

fn update_params(value: Option<&Value>) -> Parsed<Vec<(AgentNodeId, Map<String, Value>)>> {
    let map = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err("update_params must be an object mapping agent_node_id to parameters".into()),
    };
    map.iter()
        .map(|(key, params)| {
            let node = AgentNodeId::parse(key)
                .ok_or_else(|| format!("update_params: key {key:?} is not an agent_node_id (a UUID)"))?;
            match params {
                Value::Object(params) => Ok((node, params.clone())),
                _ => Err(format!("update_params.{key} must be an object of parameters")),
            }
        })
        .collect()
}

fn ignore_nodes(value: Option<&Value>) -> Parsed<Vec<AgentNodeId>> {
    let values = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(values)) => values,
        Some(_) => return Err("ignore_nodes must be an array of agent_node_id strings".into()),
    };
    let mut nodes = Vec::new();
    for (index, value) in values.iter().enumerate() {
        let node = value
            .as_str()
            .and_then(AgentNodeId::parse)
            .ok_or_else(|| format!("ignore_nodes[{index}] must be an agent_node_id (a UUID)"))?;
        if !nodes.contains(&node) {
            nodes.push(node);
        }
    }
    Ok(nodes)
}

fn callback_url(value: Option<&Value>) -> Parsed<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => {
            check_url(text, "callback_url")?;
            Ok(Some(text.clone()))
        }
        Some(_) => Err("callback_url must be a string".into()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(body: Value) -> Parsed<StartRequest> {
        StartRequest::parse(body.as_object().unwrap())
    }

    #[test]
    fn top_level_windows_apply_to_plain_arrays_and_items_may_override() {
        let id = UploadId::new_v4();
        let request = parse(json!({
            "video_ids": [id.to_string()],
            "video_url_inputs": [{"url": "https://example.com/a.mp4", "input_clip_end_ms": 900}],
            "input_clip_start_ms": 100,
        }))
        .unwrap();
        let Inputs::TopLevel(items) = request.inputs else { panic!() };
        assert_eq!(items[0].reference, InputRef::Upload(id));
        assert_eq!((items[0].clip_start_ms, items[0].clip_end_ms), (Some(100), None));
        assert_eq!((items[1].clip_start_ms, items[1].clip_end_ms), (Some(100), Some(900)));
    }

    #[test]
    fn refusals_name_the_field() {
        let cases = [
            (json!({"video_ids": ["x"], "video_inputs": []}), "not both"),
            (json!({"video_ids": ["nope"]}), "video_ids[0] must be a video UUID"),
            (
                json!({"video_ids": [UploadId::new_v4().to_string()], "input_clip_start_ms": 5, "input_clip_end_ms": 5}),
                "must be greater than",
            ),
            (json!({"video_urls": ["ftp://x/y"]}), "video_urls[0] must be an http"),
            (json!({"surprise": 1}), "unknown property: surprise"),
            (json!({"video_inputs": [{"video_ids": []}]}), "video_inputs[0].agent_node_id is required"),
            (json!({"ignore_nodes": [1]}), "ignore_nodes[0]"),
            (json!({"update_params": {"k": {}}}), "update_params: key \"k\""),
            (json!({"callback_url": "mailto:a@b"}), "callback_url must be an http"),
            (json!({"video_ids": "abc"}), "video_ids must be an array"),
            (json!({"input_clip_start_ms": -1, "video_ids": []}), "non-negative integer"),
        ];
        for (body, expected) in cases {
            let error = parse(body.clone()).unwrap_err();
            assert!(error.contains(expected), "{body}: {error}");
        }
    }

    #[test]
    fn ten_thousand_ids_are_refused_before_any_lookup() {
        let ids: Vec<String> = (0..10_000).map(|_| UploadId::new_v4().to_string()).collect();
        let error = parse(json!({ "video_ids": ids })).unwrap_err();
        assert!(error.contains("at most 100"), "{error}");
    }
}
