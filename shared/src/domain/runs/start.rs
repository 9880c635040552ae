//! Parsing `POST /agent/{id}/run`: the input forms and rules 1–9 of the contract that
//! can be checked on the body alone. Every refusal names the field and the problem.

use serde_json::{Map, Value};

use super::{MediaId, MAX_INPUTS};
use crate::core::ssrf::MAX_URL_CHARS;
use crate::domain::asset_manager::Artifact;
use crate::domain::ids::AgentNodeId;
use crate::domain::ids::AssetItemId;
use crate::domain::ids::UploadId;

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

/// The prefix of the fields of an object nested at `at`: `video_inputs[0].`, or nothing
/// at the top level.
fn prefix(at: &str) -> String {
    if at.is_empty() {
        String::new()
    } else {
        format!("{at}.")
    }
}

crate::closed_body! {
    /// An input by ID with its own clip window.
    #[schema(as = IdInput)]
    pub struct IdItem -> String, at at {
        #[schema(value_type = uuid::Uuid)]
        id: String = |value| item_text(value, at, "id"),
        #[schema(minimum = 0, maximum = 18000000)]
        input_clip_start_ms: Option<u64> = |value| offset(value, &prefix(at), "input_clip_start_ms"),
        #[schema(minimum = 1, maximum = 18000000)]
        input_clip_end_ms: Option<u64> = |value| offset(value, &prefix(at), "input_clip_end_ms"),
    }
}

crate::closed_body! {
    /// An input by URL with its own clip window.
    #[schema(as = UrlInput)]
    pub struct UrlItem -> String, at at {
        url: String = |value| item_text(value, at, "url"),
        #[schema(minimum = 0, maximum = 18000000)]
        input_clip_start_ms: Option<u64> = |value| offset(value, &prefix(at), "input_clip_start_ms"),
        #[schema(minimum = 1, maximum = 18000000)]
        input_clip_end_ms: Option<u64> = |value| offset(value, &prefix(at), "input_clip_end_ms"),
    }
}

crate::closed_body! {
    /// An asset-manager item as an input.
    #[schema(as = AssetInput)]
    pub struct AssetItem -> String, at at {
        #[schema(value_type = uuid::Uuid)]
        id: AssetItemId = |value: Option<&Value>| match value {
            Some(Value::String(text)) => AssetItemId::parse(text)
                .ok_or_else(|| format!("{at}.id must be the UUID of the external item, got {text:?}")),
            Some(_) => Err(format!("{at}.id must be a string")),
            None => Err(format!("{at}.id is required")),
        },
        /// Default `highres`.
        artifact: Option<Artifact> = |value: Option<&Value>| match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Artifact::parse(text)
                .map(Some)
                .ok_or_else(|| format!("{at}.artifact must be highres, proxy or auto, got {text:?}")),
            Some(_) => Err(format!("{at}.artifact must be a string")),
        },
        #[schema(minimum = 0, maximum = 18000000)]
        input_clip_start_ms: Option<u64> = |value| offset(value, &prefix(at), "input_clip_start_ms"),
        #[schema(minimum = 1, maximum = 18000000)]
        input_clip_end_ms: Option<u64> = |value| offset(value, &prefix(at), "input_clip_end_ms"),
    }
}

/// Declares a body with the input arrays a run takes at the top level or in a
/// `video_inputs` entry (`video_ids` … `asset_manager_assets`, and the clip window), after
/// its own fields, and [`InputArrays`] to read them by.
macro_rules! with_input_arrays {
    ($(#[$meta:meta])* pub struct $name:ident, at $at:ident { $($field:tt)* }) => {
        crate::closed_body! {
            $(#[$meta])*
            pub struct $name -> String, at $at {
                $($field)*
                #[schema(value_type = Option<Vec<uuid::Uuid>>, nullable = false)]
                video_ids: Option<Vec<String>> = |value| texts(value, &prefix($at), "video_ids"),
                #[schema(value_type = Option<Vec<uuid::Uuid>>, nullable = false)]
                node_render_ids: Option<Vec<String>> = |value| texts(value, &prefix($at), "node_render_ids"),
                #[schema(nullable = false)]
                video_urls: Option<Vec<String>> = |value| texts(value, &prefix($at), "video_urls"),
                #[schema(minimum = 0, maximum = 18000000)]
                input_clip_start_ms: Option<u64> = |value| offset(value, &prefix($at), "input_clip_start_ms"),
                #[schema(minimum = 1, maximum = 18000000)]
                input_clip_end_ms: Option<u64> = |value| offset(value, &prefix($at), "input_clip_end_ms"),
                #[schema(nullable = false)]
                video_id_inputs: Option<Vec<IdItem>> =
                    |value| objects(value, &prefix($at), "video_id_inputs", IdItem::parse_at),
                #[schema(nullable = false)]
                node_render_inputs: Option<Vec<IdItem>> =
                    |value| objects(value, &prefix($at), "node_render_inputs", IdItem::parse_at),
                #[schema(nullable = false)]
                video_url_inputs: Option<Vec<UrlItem>> =
                    |value| objects(value, &prefix($at), "video_url_inputs", UrlItem::parse_at),
                #[schema(nullable = false)]
                youtube_url_inputs: Option<Vec<UrlItem>> =
                    |value| objects(value, &prefix($at), "youtube_url_inputs", UrlItem::parse_at),
                #[schema(nullable = false)]
                asset_manager_assets: Option<Vec<AssetItem>> =
                    |value| objects(value, &prefix($at), "asset_manager_assets", AssetItem::parse_at),
            }
        }

        impl $name {
            fn arrays(&self) -> InputArrays<'_> {
                InputArrays {
                    video_ids: &self.video_ids,
                    node_render_ids: &self.node_render_ids,
                    video_urls: &self.video_urls,
                    window: (self.input_clip_start_ms, self.input_clip_end_ms),
                    video_id_inputs: &self.video_id_inputs,
                    node_render_inputs: &self.node_render_inputs,
                    video_url_inputs: &self.video_url_inputs,
                    youtube_url_inputs: &self.youtube_url_inputs,
                    asset_manager_assets: &self.asset_manager_assets,
                }
            }
        }
    };
}

with_input_arrays! {
    /// The inputs of one Video Input tile (`video_inputs`).
    #[schema(as = TileInputs)]
    pub struct TileBody, at at {
        #[schema(value_type = uuid::Uuid)]
        agent_node_id: AgentNodeId = |value: Option<&Value>| match value {
            Some(Value::String(text)) => AgentNodeId::parse(text)
                .ok_or_else(|| format!("{at}.agent_node_id must be a UUID, got {text:?}")),
            Some(_) => Err(format!("{at}.agent_node_id must be a string")),
            None => Err(format!("{at}.agent_node_id is required")),
        },
    }
}

with_input_arrays! {
    /// `POST /agent/{agent_id}/run`: either `video_inputs` or the top-level input arrays.
    #[schema(as = StartRun)]
    pub struct StartBody, at at {
        #[schema(nullable = false, min_items = 1)]
        video_inputs: Option<Vec<TileBody>> = |value: Option<&Value>| match value {
            None => Ok(None),
            Some(Value::Array(entries)) => entries
                .iter()
                .enumerate()
                .map(|(index, entry)| {
                    let at = format!("video_inputs[{index}]");
                    let Value::Object(entry) = entry else { return Err(format!("{at} must be an object")) };
                    TileBody::parse_at(&at, entry)
                })
                .collect::<Parsed<Vec<_>>>()
                .map(Some),
            Some(_) => Err("video_inputs must be an array of objects".into()),
        },
        /// Where run events are POSTed.
        callback_url: Option<String> = callback_url,
        /// `agent_node_id` → parameters to override for this run (null: none).
        #[schema(value_type = Option<std::collections::BTreeMap<String, Map<String, Value>>>)]
        update_params: Vec<(AgentNodeId, Map<String, Value>)> = update_params,
        /// `agent_node_id`s bypassed in this run (null: none).
        #[schema(value_type = Option<Vec<uuid::Uuid>>)]
        ignore_nodes: Vec<AgentNodeId> = ignore_nodes,
    }
}

/// The clip window's properties.
const WINDOW: [&str; 2] = ["input_clip_start_ms", "input_clip_end_ms"];
const NOT_BOTH: &str =
    "use either video_inputs or the top-level input arrays (video_ids, node_render_ids, video_urls, ...), not both";
const WINDOW_PER_ENTRY: &str = "input_clip_start_ms and input_clip_end_ms apply to the top-level input arrays; \
                                with video_inputs, give them in each entry";
const WINDOW_WITHOUT_INPUT: &str = "input_clip_start_ms and input_clip_end_ms were given without any input";

/// True for the input arrays of a body or entry (`video_ids` … `asset_manager_assets`).
fn is_input_array(name: &str) -> bool {
    name != "agent_node_id" && !WINDOW.contains(&name)
}

/// The input arrays of the body or of a `video_inputs` entry, as parsed.
struct InputArrays<'a> {
    video_ids: &'a Option<Vec<String>>,
    node_render_ids: &'a Option<Vec<String>>,
    video_urls: &'a Option<Vec<String>>,
    window: (Option<u64>, Option<u64>),
    video_id_inputs: &'a Option<Vec<IdItem>>,
    node_render_inputs: &'a Option<Vec<IdItem>>,
    video_url_inputs: &'a Option<Vec<UrlItem>>,
    youtube_url_inputs: &'a Option<Vec<UrlItem>>,
    asset_manager_assets: &'a Option<Vec<AssetItem>>,
}

impl InputArrays<'_> {
    /// True when any input array was given.
    fn any(&self) -> bool {
        self.video_ids.is_some()
            || self.node_render_ids.is_some()
            || self.video_urls.is_some()
            || self.video_id_inputs.is_some()
            || self.node_render_inputs.is_some()
            || self.video_url_inputs.is_some()
            || self.youtube_url_inputs.is_some()
            || self.asset_manager_assets.is_some()
    }
}

/// The text of a required string property of an item at `at`.
fn item_text(value: Option<&Value>, at: &str, key: &str) -> Parsed<String> {
    match value {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(_) => Err(format!("{at}.{key} must be a string")),
        None => Err(format!("{at}.{key} is required")),
    }
}

/// A plain input array: at most [`MAX_INPUTS`] strings.
fn texts(value: Option<&Value>, prefix: &str, name: &str) -> Parsed<Option<Vec<String>>> {
    let Some(value) = value else { return Ok(None) };
    let Value::Array(values) = value else { return Err(format!("{prefix}{name} must be an array of strings")) };
    if values.len() > MAX_INPUTS {
        return Err(format!("{prefix}{name} may have at most {MAX_INPUTS} items; it has {}", values.len()));
    }
    values
        .iter()
        .enumerate()
        .map(|(index, value)| match value {
            Value::String(text) => Ok(text.clone()),
            _ => Err(format!("{prefix}{name}[{index}] must be a string")),
        })
        .collect::<Parsed<Vec<_>>>()
        .map(Some)
}

/// A per-item input array: at most [`MAX_INPUTS`] objects, each read by `parse_at`.
fn objects<T>(
    value: Option<&Value>,
    prefix: &str,
    name: &str,
    parse_at: fn(&str, &Map<String, Value>) -> Parsed<T>,
) -> Parsed<Option<Vec<T>>> {
    let Some(value) = value else { return Ok(None) };
    let Value::Array(values) = value else { return Err(format!("{prefix}{name} must be an array of objects")) };
    if values.len() > MAX_INPUTS {
        return Err(format!("{prefix}{name} may have at most {MAX_INPUTS} items; it has {}", values.len()));
    }
    values
        .iter()
        .enumerate()
        .map(|(index, value)| {
            let field = format!("{prefix}{name}[{index}]");
            let Value::Object(item) = value else { return Err(format!("{field} must be an object")) };
            parse_at(&field, item)
        })
        .collect::<Parsed<Vec<_>>>()
        .map(Some)
}

impl StartRequest {
    /// Parses a start body ([`StartBody`]) and applies the rules across its fields. How
    /// the inputs are given is read from the properties present, null or not, before any
    /// value: `{"input_clip_start_ms": null}` alone is a window without input.
    pub fn parse(body: &Map<String, Value>) -> Parsed<Self> {
        if let Some(unknown) = crate::core::json::unknown_property(body, StartBody::PROPERTIES) {
            return Err(unknown);
        }
        let window = WINDOW.iter().any(|name| body.contains_key(*name));
        let arrays = TileBody::PROPERTIES.iter().any(|name| is_input_array(name) && body.contains_key(*name));
        match (body.contains_key("video_inputs"), arrays, window) {
            (true, true, _) => Err(NOT_BOTH.into()),
            (true, false, true) => Err(WINDOW_PER_ENTRY.into()),
            (false, false, true) => Err(WINDOW_WITHOUT_INPUT.into()),
            _ => Self::from_body(StartBody::parse(body)?),
        }
    }

    /// The request a parsed body makes: one way of giving inputs, windows that end after
    /// they start, references that parse, and at most [`MAX_INPUTS`] inputs in all.
    pub fn from_body(body: StartBody) -> Parsed<Self> {
        let top = body.arrays();
        let window_given = top.window != (None, None);
        let inputs = match (&body.video_inputs, top.any()) {
            (Some(_), true) => return Err(NOT_BOTH.into()),
            (Some(_), false) if window_given => return Err(WINDOW_PER_ENTRY.into()),
            (Some(entries), false) => Inputs::PerTile(per_tile(entries)?),
            (None, true) => Inputs::TopLevel(items_of(&top, "", window(top.window, "")?)?),
            (None, false) if window_given => return Err(WINDOW_WITHOUT_INPUT.into()),
            (None, false) => Inputs::None,
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
            update_params: body.update_params,
            ignore_nodes: body.ignore_nodes,
            callback_url: body.callback_url,
        })
    }
}

fn per_tile(entries: &[TileBody]) -> Parsed<Vec<(AgentNodeId, Vec<InputItem>)>> {
    if entries.is_empty() {
        return Err("video_inputs must have at least one entry".into());
    }
    if entries.len() > MAX_INPUTS {
        return Err(format!("video_inputs may have at most {MAX_INPUTS} entries"));
    }
    let mut tiles: Vec<(AgentNodeId, Vec<InputItem>)> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let prefix = format!("video_inputs[{index}]");
        let node = entry.agent_node_id;
        if tiles.iter().any(|(tile, _)| *tile == node) {
            return Err(format!("{prefix}: video_inputs has more than one entry for agent_node_id {node}"));
        }
        let arrays = entry.arrays();
        let items = items_of(&arrays, &format!("{prefix}."), window(arrays.window, &format!("{prefix}."))?)?;
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

/// A clip window (of the body, an entry or an item): end must follow start.
fn window((start, end): (Option<u64>, Option<u64>), prefix: &str) -> Parsed<(Option<u64>, Option<u64>)> {
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

/// A clip offset: null is none; at most [`MAX_CLIP_MS`].
fn offset(value: Option<&Value>, prefix: &str, name: &str) -> Parsed<Option<u64>> {
    match value {
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
fn items_of(arrays: &InputArrays<'_>, prefix: &str, window: (Option<u64>, Option<u64>)) -> Parsed<Vec<InputItem>> {
    let mut items = Vec::new();
    let plain: [(&str, &Option<Vec<String>>, RefParser); 3] = [
        ("video_ids", arrays.video_ids, upload_ref),
        ("node_render_ids", arrays.node_render_ids, render_ref),
        ("video_urls", arrays.video_urls, url_ref),
    ];
    for (name, values, reference) in plain {
        for (index, text) in values.iter().flatten().enumerate() {
            let field = format!("{prefix}{name}[{index}]");
            items.push(InputItem {
                reference: reference(text, &field)?,
                clip_start_ms: window.0,
                clip_end_ms: window.1,
                field,
            });
        }
    }
    let by_id: [(&str, &Option<Vec<IdItem>>, RefParser); 2] = [
        ("video_id_inputs", arrays.video_id_inputs, upload_ref),
        ("node_render_inputs", arrays.node_render_inputs, render_ref),
    ];
    for (name, values, reference) in by_id {
        for (index, item) in values.iter().flatten().enumerate() {
            let field = format!("{prefix}{name}[{index}]");
            let (start, end) = item_window((item.input_clip_start_ms, item.input_clip_end_ms), &field, window)?;
            let reference = reference(&item.id, &format!("{field}.id"))?;
            items.push(InputItem { reference, clip_start_ms: start, clip_end_ms: end, field });
        }
    }
    let by_url: [(&str, &Option<Vec<UrlItem>>, RefParser); 2] = [
        ("video_url_inputs", arrays.video_url_inputs, url_ref),
        ("youtube_url_inputs", arrays.youtube_url_inputs, site_ref),
    ];
    for (name, values, reference) in by_url {
        for (index, item) in values.iter().flatten().enumerate() {
            let field = format!("{prefix}{name}[{index}]");
            let (start, end) = item_window((item.input_clip_start_ms, item.input_clip_end_ms), &field, window)?;
            let reference = reference(&item.url, &format!("{field}.url"))?;
            items.push(InputItem { reference, clip_start_ms: start, clip_end_ms: end, field });
        }
    }
    for (index, item) in arrays.asset_manager_assets.iter().flatten().enumerate() {
        let field = format!("{prefix}asset_manager_assets[{index}]");
        let (start, end) = item_window((item.input_clip_start_ms, item.input_clip_end_ms), &field, window)?;
        let reference = InputRef::Asset { id: item.id, artifact: item.artifact.unwrap_or(Artifact::Highres) };
        items.push(InputItem { reference, clip_start_ms: start, clip_end_ms: end, field });
    }
    Ok(items)
}

/// A per-item form's window: its own offsets, else those of the object it is in; end
/// must follow start.
fn item_window(
    own: (Option<u64>, Option<u64>),
    field: &str,
    outer: (Option<u64>, Option<u64>),
) -> Parsed<(Option<u64>, Option<u64>)> {
    let own = window(own, &format!("{field}."))?;
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
            // How inputs are given is read from the properties present, null or not.
            (json!({"input_clip_start_ms": null}), "given without any input"),
            (json!({"video_inputs": [], "video_ids": null}), "not both"),
            (json!({"video_inputs": [], "input_clip_end_ms": null}), "give them in each entry"),
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
