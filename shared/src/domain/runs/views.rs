//! How runs are shown: the run record, the nodes view, list items and webhook payloads,
//! with 7-day signed links to their media (`{public_url}/media/{id}?expires=…&signature=…`).
//! Each view is the type serialized and the schema the OpenAPI document gives.

use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::edits::{Medium, Placement};
use super::{InputSource, MediaId, NodeIndex, NodeStatus, NodeStatusCounts, Run, RunStatus, TriggeredBy};
use crate::domain::ids::{AgentId, AgentNodeId, RunId};
use crate::domain::media::{MediaLinks, MediaType};
use crate::domain::nodes::placement::Role;
use crate::domain::nodes::NodeTypeRef;
use crate::domain::time::Timestamp;
use crate::domain::webhooks::EventFlag;

/// `licensed_asset_family` of media the caller supplied (inputs, uploads).
pub const CUSTOMER_SUPPLIED: &str = "customer_supplied";
/// `licensed_asset_family` of media a generation provider made.
pub const GENERATED: &str = "generated";

/// A run input's links.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RunInput)]
pub struct InputView {
    pub video_url: String,
    #[schema(required = true)]
    pub thumbnail_url: Option<String>,
}

/// A citation of external or generated media an output uses.
#[derive(Debug, PartialEq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub provider: String,
    pub source_kind: &'static str,
    pub media_type: &'static str,
    /// The provider's ID of the medium, given when resolved: absent for a plain URL and
    /// generated media.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub provider_asset_id: Option<String>,
    /// The media ID of the cited file inside the run: a URL input's downloaded copy (cut
    /// to its window), the upload, or the generated file.
    #[schema(value_type = String)]
    pub render_asset_id: MediaId,
    /// The URL as given, the asset item's name, or the prompt of generated media; empty
    /// for uploaded music and pictures (asked for by ID, not by a query).
    pub query: String,
    /// Where the medium starts playing in the output.
    pub start_ms: u64,
    /// Where it stops playing in the output (the end of its window).
    pub end_ms: u64,
    pub placement: &'static str,
    pub layout: &'static str,
    pub licensed_asset_family: &'static str,
}

/// A run output.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RunOutput)]
pub struct OutputView {
    /// Render ID, usable as `node_render_ids` of another run.
    #[schema(value_type = uuid::Uuid)]
    pub id: MediaId,
    /// Signed, valid 7 days.
    pub video_url: String,
    #[schema(required = true)]
    pub thumbnail_url: Option<String>,
    pub completed_at: Timestamp,
    #[schema(required = true, value_type = Option<uuid::Uuid>)]
    pub original_node_id: AgentNodeId,
    /// A zip of the output's timeline (OTIO, FCP7 XML, EDL).
    #[schema(required = true)]
    pub timeline_prproj_url: Option<String>,
    pub sources: Vec<Source>,
}

/// Errors of one template node.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RunErrors)]
pub struct ErrorsView {
    #[schema(required = true, value_type = Option<uuid::Uuid>)]
    pub original_node_id: AgentNodeId,
    pub messages: Vec<String>,
}

/// `GET /agent_run/{run_id}`
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RunRecord)]
pub struct RecordView<'a> {
    #[schema(value_type = uuid::Uuid)]
    pub run_id: RunId,
    #[schema(value_type = uuid::Uuid)]
    pub agent_id: AgentId,
    pub started_at: Timestamp,
    pub updated_at: Timestamp,
    #[schema(required = true)]
    pub finished_at: Option<Timestamp>,
    pub status: RunStatus,
    #[schema(required = true)]
    pub status_message: Option<&'a str>,
    pub node_status_counts: NodeStatusCounts,
    pub inputs: Vec<InputView>,
    pub outputs: Vec<OutputView>,
    pub needs_credits: bool,
    pub errors: Vec<ErrorsView>,
    /// Null for runs started through the API.
    #[schema(required = true)]
    pub triggered_by: Option<&'a TriggeredBy>,
    /// Parts made of the run's outputs made in parts (long edits), over all its nodes;
    /// absent when none is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub progress: Option<Progress>,
}

/// A run in a list.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RunSummary)]
pub struct SummaryView<'a> {
    #[schema(value_type = uuid::Uuid)]
    pub run_id: RunId,
    #[schema(value_type = uuid::Uuid)]
    pub agent_id: AgentId,
    pub status: RunStatus,
    #[schema(required = true)]
    pub status_message: Option<&'a str>,
    pub started_at: Timestamp,
    pub updated_at: Timestamp,
    pub node_status_counts: NodeStatusCounts,
    pub inputs: Vec<InputView>,
    pub outputs: Vec<OutputView>,
    #[schema(required = true)]
    pub triggered_by: Option<&'a TriggeredBy>,
}

/// A runtime node of a run (an item of `GET /agent_run/{id}/nodes` and of a webhook's
/// `updated_nodes`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(description = "A runtime node of a run.")]
#[serde(deny_unknown_fields)]
#[schema(as = RunNode)]
pub struct NodeView<'a> {
    #[schema(value_type = uuid::Uuid)]
    pub agent_node_id: AgentNodeId,
    #[schema(required = true, value_type = Option<uuid::Uuid>)]
    pub original_node_id: AgentNodeId,
    pub node_type: NodeTypeRef,
    pub status: NodeStatus,
    #[schema(required = true)]
    pub status_message: Option<String>,
    pub errors: Vec<&'a str>,
    pub outputs: Vec<OutputView>,
    pub needs_credits: bool,
    /// Parts made of the node's outputs made in parts (long edits); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub progress: Option<Progress>,
    /// When a worker first took one of the node's tasks (their current attempts); null
    /// before.
    #[schema(required = true)]
    pub started_at: Option<Timestamp>,
    /// When the last of the node's tasks ended; null while one has not.
    #[schema(required = true)]
    pub finished_at: Option<Timestamp>,
}

/// How far a node's long edits are: parts made, of how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RunNodeProgress)]
pub struct Progress {
    #[schema(value_type = u64)]
    pub done: usize,
    #[schema(value_type = u64)]
    pub total: usize,
}

/// `GET /agent_run/{run_id}/nodes`
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RunNodes)]
pub struct NodesView<'a> {
    #[schema(value_type = uuid::Uuid)]
    pub run_id: RunId,
    pub status: RunStatus,
    pub nodes: Vec<NodeView<'a>>,
}

/// `flag` of a `RUN_STARTED` payload.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub enum RunStartedFlag {
    #[serde(rename = "RUN_STARTED")]
    RunStarted,
}

/// `flag` of a `RUN_PROGRESS` payload.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub enum RunProgressFlag {
    #[serde(rename = "RUN_PROGRESS")]
    RunProgress,
}

/// `flag` of a `RUN_FINISHED` payload.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub enum RunFinishedFlag {
    #[serde(rename = "RUN_FINISHED")]
    RunFinished,
}

/// The body of the `RUN_STARTED` webhook: the run began (again, after a resume).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunStartedEvent<'a> {
    pub flag: RunStartedFlag,
    /// 1, 2, … per run: order a run's events by it.
    #[schema(minimum = 1)]
    pub sequence: u64,
    pub occurred_at: Timestamp,
    #[schema(value_type = uuid::Uuid)]
    pub agent_id: AgentId,
    #[schema(value_type = uuid::Uuid)]
    pub run_id: RunId,
    pub status: RunStatus,
    pub node_status_counts: NodeStatusCounts,
    /// Null for runs started through the API.
    #[schema(required = true)]
    pub triggered_by: Option<&'a TriggeredBy>,
    pub inputs: Vec<InputView>,
}

/// The body of the `RUN_PROGRESS` webhook: nodes whose status changed together.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunProgressEvent<'a> {
    pub flag: RunProgressFlag,
    #[schema(minimum = 1)]
    pub sequence: u64,
    pub occurred_at: Timestamp,
    #[schema(value_type = uuid::Uuid)]
    pub agent_id: AgentId,
    #[schema(value_type = uuid::Uuid)]
    pub run_id: RunId,
    pub status: RunStatus,
    pub node_status_counts: NodeStatusCounts,
    #[schema(required = true)]
    pub triggered_by: Option<&'a TriggeredBy>,
    pub updated_nodes: Vec<NodeView<'a>>,
}

/// The body of the `RUN_FINISHED` webhook: the run ended (`completed`,
/// `partial_complete`, `failed` or `cancelled`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunFinishedEvent<'a> {
    pub flag: RunFinishedFlag,
    #[schema(minimum = 1)]
    pub sequence: u64,
    pub occurred_at: Timestamp,
    #[schema(value_type = uuid::Uuid)]
    pub agent_id: AgentId,
    #[schema(value_type = uuid::Uuid)]
    pub run_id: RunId,
    pub status: RunStatus,
    pub node_status_counts: NodeStatusCounts,
    #[schema(required = true)]
    pub triggered_by: Option<&'a TriggeredBy>,
    #[schema(required = true)]
    pub status_message: Option<&'a str>,
    pub needs_credits: bool,
    pub errors: Vec<ErrorsView>,
    pub inputs: Vec<InputView>,
    pub outputs: Vec<OutputView>,
    #[schema(required = true)]
    pub finished_at: Option<Timestamp>,
}

/// A citation's medium, before its window in the output is known.
struct Cited {
    provider: String,
    source_kind: &'static str,
    media_type: &'static str,
    provider_asset_id: Option<String>,
    render_asset_id: MediaId,
    query: String,
    placement: &'static str,
    layout: &'static str,
}

impl Cited {
    /// The citation of this medium playing from `start_ms` to `end_ms` of the output.
    fn playing(self, start_ms: u64, end_ms: u64, licensed_asset_family: &'static str) -> Source {
        Source {
            provider: self.provider,
            source_kind: self.source_kind,
            media_type: self.media_type,
            provider_asset_id: self.provider_asset_id,
            render_asset_id: self.render_asset_id,
            query: self.query,
            start_ms,
            end_ms,
            placement: self.placement,
            layout: self.layout,
            licensed_asset_family,
        }
    }

    /// A video input cited as the main picture.
    fn main_video(provider: String, kind: &'static str, id: Option<String>, asset: MediaId, query: String) -> Self {
        Self {
            provider,
            source_kind: kind,
            media_type: "video",
            provider_asset_id: id,
            render_asset_id: asset,
            query,
            placement: "main",
            layout: "full_frame",
        }
    }
}

impl Run {
    fn output_views(&self, links: &MediaLinks, now: Timestamp, node: Option<NodeIndex>) -> Vec<OutputView> {
        self.outputs
            .iter()
            .filter(|output| node.is_none_or(|index| self.nodes[index].agent_node_id == output.node))
            .map(|output| OutputView {
                id: output.id,
                video_url: links.link(output.id, now),
                thumbnail_url: output.thumbnail.map(|id| links.link(id, now)),
                completed_at: output.completed_at,
                original_node_id: output.original_node_id,
                timeline_prproj_url: output.timeline.map(|id| links.link(id, now)),
                sources: self.sources(output),
            })
            .collect()
    }

    /// `sources`: a citation per stretch of an external or uploaded medium the output
    /// uses (URL inputs, uploaded music and pictures), with where it plays in the
    /// output. Uploaded videos and earlier renders are the caller's own: not cited.
    /// Every field the contract types is always there with its type: `render_asset_id`
    /// (a string), `query` (a string, empty when nothing was asked for), `end_ms` (an
    /// integer); only `provider_asset_id` is left out when there is none.
    fn sources(&self, output: &super::RunOutput) -> Vec<Source> {
        if output.placements.is_empty() {
            // An output recorded before placements were: its URL inputs, as cited then.
            return self.url_citations(output.id);
        }
        output.placements.iter().filter_map(|placement| self.citation(placement, output.id)).collect()
    }

    /// The media ID a citation names: the cited file's own, or (for a run recorded
    /// before its inputs, uploads and generated files had one) the output holding it.
    fn asset_id(own: Option<MediaId>, output: MediaId) -> MediaId {
        own.unwrap_or(output)
    }

    /// Where an input's window ends in the input: its clip's end, else the length of the
    /// copy its Video Input task made (from the window's start), else its start.
    fn input_end_ms(&self, input: usize) -> u64 {
        let Some(bound) = self.inputs.get(input) else { return 0 };
        let start = bound.clip_start_ms.unwrap_or(0);
        bound.clip_end_ms.unwrap_or_else(|| {
            let made = self.tasks.iter().find(|task| task.source == super::TaskSource::Input { input });
            start + made.and_then(|task| task.result.as_ref()).map_or(0, |file| file.duration_ms)
        })
    }

    fn url_citations(&self, output: MediaId) -> Vec<Source> {
        self.inputs
            .iter()
            .enumerate()
            .filter_map(|(at, input)| match &input.source {
                InputSource::Url { url } => {
                    let asset = Self::asset_id(input.clipped.map(|clipped| clipped.video), output);
                    let cited = Cited::main_video("url".to_owned(), "video_url", None, asset, url.clone());
                    Some(cited.playing(input.clip_start_ms.unwrap_or(0), self.input_end_ms(at), CUSTOMER_SUPPLIED))
                }
                _ => None,
            })
            .collect()
    }

    fn citation(&self, placement: &Placement, output: MediaId) -> Option<Source> {
        let upload_asset = |upload| Self::asset_id(self.assets.get(upload).and_then(|asset| asset.media), output);
        let cited = match &placement.medium {
            Medium::Input { input } => self.input_citation(*input, output)?,
            Medium::Generated { task, role } => return self.generated_citation(placement, *task, *role, output),
            // An upload was asked for by ID, not found by a query: the query is empty.
            Medium::Music { upload } => Cited {
                provider: "upload".to_owned(),
                source_kind: "uploaded_audio",
                media_type: "audio",
                provider_asset_id: Some(upload.to_string()),
                render_asset_id: upload_asset(upload),
                query: String::new(),
                placement: "background",
                layout: "audio_only",
            },
            Medium::Picture { upload } => Cited {
                provider: "upload".to_owned(),
                source_kind: "uploaded_image",
                media_type: "image",
                provider_asset_id: Some(upload.to_string()),
                render_asset_id: upload_asset(upload),
                query: String::new(),
                placement: "overlay",
                layout: "picture_in_picture",
            },
        };
        Some(cited.playing(placement.record_in_ms, placement.record_out_ms, CUSTOMER_SUPPLIED))
    }

    /// The citation of input `input` (None for an upload or a render, which cite
    /// nothing), without its window.
    fn input_citation(&self, input: usize, output: MediaId) -> Option<Cited> {
        let bound = self.inputs.get(input)?;
        let asset = Self::asset_id(bound.clipped.map(|clipped| clipped.video), output);
        Some(match &bound.source {
            InputSource::Url { url } => Cited::main_video("url".to_owned(), "video_url", None, asset, url.clone()),
            InputSource::Site { url, video } => {
                let id = Some(video.video_id.clone());
                Cited::main_video(video.site.clone(), "video_site", id, asset, url.clone())
            }
            InputSource::Asset { item, name, provider, .. } => {
                let id = Some(item.to_string());
                Cited::main_video(provider.clone(), "asset_manager_item", id, asset, name.clone())
            }
            InputSource::Upload { .. } | InputSource::Render { .. } => return None,
        })
    }

    /// The citation of the medium generation task `task` made, placed as `placement`.
    fn generated_citation(&self, placement: &Placement, task: usize, role: Role, output: MediaId) -> Option<Source> {
        let task = self.tasks.get(task)?;
        let made = task.result.as_ref()?;
        let node = &self.nodes[*task.nodes.first()?];
        let prompt = node.settings().generation().map(|generation| generation.prompt().to_owned());
        let provider = made.generated.as_ref().map_or("unknown", |by| by.provider.as_str());
        let layout = match (made.media, role) {
            (MediaType::Audio, _) => "audio_only",
            (_, Role::Overlay) => "picture_in_picture",
            _ => "full_frame",
        };
        let cited = Cited {
            provider: provider.to_owned(),
            source_kind: "generated",
            media_type: made.media.as_str(),
            provider_asset_id: None,
            render_asset_id: Self::asset_id(made.generated.as_ref().and_then(|by| by.link), output),
            query: prompt.unwrap_or_default(),
            placement: role.as_str(),
            layout,
        };
        Some(cited.playing(placement.record_in_ms, placement.record_out_ms, GENERATED))
    }

    fn input_views(&self, links: &MediaLinks, now: Timestamp) -> Vec<InputView> {
        self.inputs
            .iter()
            .map(|input| match (&input.clipped, &input.source) {
                (Some(clipped), _) => InputView {
                    video_url: links.link(clipped.video, now),
                    thumbnail_url: clipped.thumbnail.map(|id| links.link(id, now)),
                },
                (None, InputSource::Upload { media, .. } | InputSource::Asset { media, .. }) => {
                    InputView { video_url: links.link(*media, now), thumbnail_url: None }
                }
                (None, InputSource::Render { id, .. }) => {
                    InputView { video_url: links.link(*id, now), thumbnail_url: None }
                }
                (None, InputSource::Url { url } | InputSource::Site { url, .. }) => {
                    InputView { video_url: url.clone(), thumbnail_url: None }
                }
            })
            .collect()
    }

    fn error_views(&self) -> Vec<ErrorsView> {
        self.errors()
            .into_iter()
            .map(|(original_node_id, messages)| ErrorsView { original_node_id, messages })
            .collect()
    }

    /// `GET /agent_run/{id}`.
    pub fn record_view(&self, links: &MediaLinks, now: Timestamp) -> RecordView<'_> {
        RecordView {
            run_id: self.id,
            agent_id: self.agent_id,
            started_at: self.started_at,
            updated_at: self.updated_at,
            finished_at: self.finished_at,
            status: self.status,
            status_message: self.status_message.as_deref(),
            node_status_counts: self.node_status_counts(),
            inputs: self.input_views(links, now),
            outputs: self.output_views(links, now, None),
            needs_credits: self.needs_credits,
            errors: self.error_views(),
            triggered_by: self.triggered_by.as_ref(),
            progress: self.parts_progress().map(|(done, total)| Progress { done, total }),
        }
    }

    /// An item of the run lists.
    pub fn summary_view(&self, links: &MediaLinks, now: Timestamp) -> SummaryView<'_> {
        SummaryView {
            run_id: self.id,
            agent_id: self.agent_id,
            status: self.status,
            status_message: self.status_message.as_deref(),
            started_at: self.started_at,
            updated_at: self.updated_at,
            node_status_counts: self.node_status_counts(),
            inputs: self.input_views(links, now),
            outputs: self.output_views(links, now, None),
            triggered_by: self.triggered_by.as_ref(),
        }
    }

    /// A node status entry: an item of `GET /agent_run/{id}/nodes` and of a webhook's
    /// `updated_nodes`.
    fn node_view(&self, index: NodeIndex, links: &MediaLinks, now: Timestamp) -> NodeView<'_> {
        let node = &self.nodes[index];
        let errors: Vec<&str> = self.tasks_of(index).filter_map(|(_, task)| task.error.as_deref()).collect();
        let status_message = match errors.len() {
            0 => None,
            1 => Some(errors[0].to_owned()),
            count => Some(format!("{count} tasks failed; first: {}", errors[0])),
        };
        NodeView {
            agent_node_id: node.agent_node_id,
            original_node_id: node.original_node_id,
            node_type: NodeTypeRef { node_type_id: node.node_type_id, node_type_name: node.type_name() },
            status: self.node_status(index),
            status_message,
            errors,
            outputs: self.output_views(links, now, Some(index)),
            // Blocked for credits, not for an avatar being processed.
            needs_credits: self
                .tasks_of(index)
                .any(|(_, task)| task.status == super::TaskStatus::Blocked && task.credits.is_some()),
            progress: self.progress(index).map(|(done, total)| Progress { done, total }),
            started_at: self.tasks_of(index).filter_map(|(_, task)| task.started_at).min(),
            finished_at: self
                .tasks_of(index)
                .map(|(_, task)| task.finished_at)
                .try_fold(None, |last: Option<Timestamp>, ended| ended.map(|ended| last.max(Some(ended))))
                .flatten(),
        }
    }

    /// `GET /agent_run/{id}/nodes`.
    pub fn nodes_view(&self, links: &MediaLinks, now: Timestamp) -> NodesView<'_> {
        let nodes = self.node_indexes().map(|index| self.node_view(index, links, now)).collect();
        NodesView { run_id: self.id, status: self.status, nodes }
    }

    /// The body of a webhook: the common fields, `sequence` and `occurred_at`, and the
    /// event's own (`inputs`; `updated_nodes` of the nodes given; the outcome). Links
    /// are valid 7 days from `now`, the time of the event.
    pub fn event_payload(
        &self,
        event: EventFlag,
        sequence: u64,
        updated_nodes: &[NodeIndex],
        links: &MediaLinks,
        now: Timestamp,
    ) -> Value {
        let (agent_id, run_id, status, triggered_by) =
            (self.agent_id, self.id, self.status, self.triggered_by.as_ref());
        let node_status_counts = self.node_status_counts();
        let payload = match event {
            EventFlag::RunStarted => serde_json::to_value(RunStartedEvent {
                flag: RunStartedFlag::RunStarted,
                sequence,
                occurred_at: now,
                agent_id,
                run_id,
                status,
                node_status_counts,
                triggered_by,
                inputs: self.input_views(links, now),
            }),
            EventFlag::RunProgress => serde_json::to_value(RunProgressEvent {
                flag: RunProgressFlag::RunProgress,
                sequence,
                occurred_at: now,
                agent_id,
                run_id,
                status,
                node_status_counts,
                triggered_by,
                updated_nodes: updated_nodes.iter().map(|index| self.node_view(*index, links, now)).collect(),
            }),
            EventFlag::RunFinished => serde_json::to_value(RunFinishedEvent {
                flag: RunFinishedFlag::RunFinished,
                sequence,
                occurred_at: now,
                agent_id,
                run_id,
                status,
                node_status_counts,
                triggered_by,
                status_message: self.status_message.as_deref(),
                needs_credits: self.needs_credits,
                errors: self.error_views(),
                inputs: self.input_views(links, now),
                outputs: self.output_views(links, now, None),
                finished_at: self.finished_at,
            }),
        };
        // Views of IDs, strings and numbers: serializing one into a tree cannot fail.
        payload.unwrap_or_else(|error| Value::Object(Map::from_iter([("error".to_owned(), error.to_string().into())])))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::domain::nodes::{DESTINATION, VIDEO_INPUT};
    use crate::domain::runs::engine::tests::{end, run_of};
    use crate::domain::runs::TaskIndex;

    #[test]
    fn an_output_recorded_before_placements_and_input_links_still_cites_with_every_field_typed() {
        // A URL input used from 300 ms with no end, to a Destination; the stand-in tasks
        // make 500 ms files and record no placements, as outputs stored before them.
        let mut run = run_of(&[(VIDEO_INPUT, &[]), (DESTINATION, &[0])], 1);
        run.inputs[0].clip_start_ms = Some(300);
        end(&mut run, TaskIndex(0), true);
        end(&mut run, TaskIndex(1), true);
        run.inputs[0].clipped = None;
        let output = run.outputs[0].clone();
        assert!(output.placements.is_empty());
        let cited = serde_json::to_value(run.sources(&output)).unwrap();
        assert_eq!(
            cited,
            json!([{
                "provider": "url",
                "source_kind": "video_url",
                "media_type": "video",
                "render_asset_id": output.id,
                "query": "https://example.com/0.mp4",
                "start_ms": 300,
                "end_ms": 800,
                "placement": "main",
                "layout": "full_frame",
                "licensed_asset_family": super::CUSTOMER_SUPPLIED,
            }]),
            "the input's window ends at its copy's length; the output holds the medium"
        );
    }
}
