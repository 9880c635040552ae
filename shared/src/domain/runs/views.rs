//! How runs are shown: the run record, the nodes view and list items, with 7-day signed
//! links to their media (`{public_url}/media/{id}?expires=…&signature=…`).

use serde_json::{json, Value};

use super::edits::{Medium, Placement};
use super::{InputSource, MediaId, NodeIndex, Run};
use crate::domain::media::{MediaLinks, MediaType};
use crate::domain::nodes::placement::Role;
use crate::domain::time::Timestamp;

/// `licensed_asset_family` of media the caller supplied (inputs, uploads).
pub const CUSTOMER_SUPPLIED: &str = "customer_supplied";
/// `licensed_asset_family` of media a generation provider made.
pub const GENERATED: &str = "generated";
impl Run {
    fn output_views(&self, links: &MediaLinks, now: Timestamp, node: Option<NodeIndex>) -> Vec<Value> {
        self.outputs
            .iter()
            .filter(|output| node.is_none_or(|index| self.nodes[index].agent_node_id == output.node))
            .map(|output| {
                json!({
                    "id": output.id,
                    "video_url": links.link(output.id, now),
                    "thumbnail_url": output.thumbnail.map(|id| links.link(id, now)),
                    "completed_at": output.completed_at,
                    "original_node_id": output.original_node_id,
                    "timeline_prproj_url": output.timeline.map(|id| links.link(id, now)),
                    "sources": self.sources(output),
                })
            })
            .collect()
    }

    /// `sources`: a citation per stretch of an external or uploaded medium the output
    /// uses (URL inputs, uploaded music and pictures), with where it plays in the
    /// output. Uploaded videos and earlier renders are the caller's own: not cited.
    /// Every field the contract types is always there with its type: `render_asset_id`
    /// (a string), `query` (a string, empty when nothing was asked for), `end_ms` (an
    /// integer); only `provider_asset_id` is left out when there is none.
    fn sources(&self, output: &super::RunOutput) -> Vec<Value> {
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

    fn url_citations(&self, output: MediaId) -> Vec<Value> {
        self.inputs
            .iter()
            .enumerate()
            .filter_map(|(at, input)| match &input.source {
                InputSource::Url { url } => Some(json!({
                    "provider": "url",
                    "source_kind": "video_url",
                    "media_type": "video",
                    "render_asset_id": Self::asset_id(input.clipped.map(|clipped| clipped.video), output),
                    "query": url,
                    "start_ms": input.clip_start_ms.unwrap_or(0),
                    "end_ms": self.input_end_ms(at),
                    "placement": "main",
                    "layout": "full_frame",
                    "licensed_asset_family": CUSTOMER_SUPPLIED,
                })),
                _ => None,
            })
            .collect()
    }

    fn citation(&self, placement: &Placement, output: MediaId) -> Option<Value> {
        let window = |mut citation: Value| {
            citation["start_ms"] = json!(placement.record_in_ms);
            citation["end_ms"] = json!(placement.record_out_ms);
            citation["licensed_asset_family"] = json!(CUSTOMER_SUPPLIED);
            citation
        };
        let citation = match &placement.medium {
            Medium::Input { input } => self.input_citation(*input, output)?,
            Medium::Generated { task, role } => return self.generated_citation(placement, *task, *role, output),
            // An upload was asked for by ID, not found by a query: the query is empty.
            Medium::Music { upload } => json!({
                "provider": "upload",
                "source_kind": "uploaded_audio",
                "media_type": "audio",
                "provider_asset_id": upload,
                "render_asset_id": Self::asset_id(self.assets.get(upload).and_then(|asset| asset.media), output),
                "query": "",
                "placement": "background",
                "layout": "audio_only",
            }),
            Medium::Picture { upload } => json!({
                "provider": "upload",
                "source_kind": "uploaded_image",
                "media_type": "image",
                "provider_asset_id": upload,
                "render_asset_id": Self::asset_id(self.assets.get(upload).and_then(|asset| asset.media), output),
                "query": "",
                "placement": "overlay",
                "layout": "picture_in_picture",
            }),
        };
        Some(window(citation))
    }

    /// The citation of input `input` (None for an upload or a render, which cite
    /// nothing), without its window.
    fn input_citation(&self, input: usize, output: MediaId) -> Option<Value> {
        let bound = self.inputs.get(input)?;
        let render_asset_id = Self::asset_id(bound.clipped.map(|clipped| clipped.video), output);
        Some(match &bound.source {
            InputSource::Url { url } => json!({
                "provider": "url",
                "source_kind": "video_url",
                "media_type": "video",
                "render_asset_id": render_asset_id,
                "query": url,
                "placement": "main",
                "layout": "full_frame",
            }),
            InputSource::Site { url, video } => json!({
                "provider": video.site,
                "source_kind": "video_site",
                "media_type": "video",
                "provider_asset_id": video.video_id,
                "render_asset_id": render_asset_id,
                "query": url,
                "placement": "main",
                "layout": "full_frame",
            }),
            InputSource::Asset { item, name, provider, .. } => json!({
                "provider": provider,
                "source_kind": "asset_manager_item",
                "media_type": "video",
                "provider_asset_id": item,
                "render_asset_id": render_asset_id,
                "query": name,
                "placement": "main",
                "layout": "full_frame",
            }),
            InputSource::Upload { .. } | InputSource::Render { .. } => return None,
        })
    }

    /// The citation of the medium generation task `task` made, placed as `placement`.
    fn generated_citation(&self, placement: &Placement, task: usize, role: Role, output: MediaId) -> Option<Value> {
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
        Some(json!({
            "provider": provider,
            "source_kind": "generated",
            "media_type": made.media.as_str(),
            "render_asset_id": Self::asset_id(made.generated.as_ref().and_then(|by| by.link), output),
            "query": prompt.unwrap_or_default(),
            "start_ms": placement.record_in_ms,
            "end_ms": placement.record_out_ms,
            "placement": role.as_str(),
            "layout": layout,
            "licensed_asset_family": GENERATED,
        }))
    }

    fn input_views(&self, links: &MediaLinks, now: Timestamp) -> Vec<Value> {
        self.inputs
            .iter()
            .map(|input| match (&input.clipped, &input.source) {
                (Some(clipped), _) => json!({
                    "video_url": links.link(clipped.video, now),
                    "thumbnail_url": clipped.thumbnail.map(|id| links.link(id, now)),
                }),
                (None, InputSource::Upload { media, .. } | InputSource::Asset { media, .. }) => {
                    json!({ "video_url": links.link(*media, now), "thumbnail_url": null })
                }
                (None, InputSource::Render { id, .. }) => {
                    json!({ "video_url": links.link(*id, now), "thumbnail_url": null })
                }
                (None, InputSource::Url { url } | InputSource::Site { url, .. }) => {
                    json!({ "video_url": url, "thumbnail_url": null })
                }
            })
            .collect()
    }

    fn error_views(&self) -> Vec<Value> {
        self.errors()
            .into_iter()
            .map(|(node, messages)| json!({ "original_node_id": node, "messages": messages }))
            .collect()
    }

    /// `GET /agent_run/{id}`.
    pub fn record_view(&self, links: &MediaLinks, now: Timestamp) -> Value {
        json!({
            "run_id": self.id,
            "agent_id": self.agent_id,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            "finished_at": self.finished_at,
            "status": self.status.as_str(),
            "status_message": self.status_message,
            "node_status_counts": self.node_status_counts(),
            "inputs": self.input_views(links, now),
            "outputs": self.output_views(links, now, None),
            "needs_credits": self.needs_credits,
            "errors": self.error_views(),
            "triggered_by": self.triggered_by,
        })
    }

    /// An item of the run lists.
    pub fn summary_view(&self, links: &MediaLinks, now: Timestamp) -> Value {
        json!({
            "run_id": self.id,
            "agent_id": self.agent_id,
            "status": self.status.as_str(),
            "status_message": self.status_message,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            "node_status_counts": self.node_status_counts(),
            "inputs": self.input_views(links, now),
            "outputs": self.output_views(links, now, None),
            "triggered_by": self.triggered_by,
        })
    }

    /// A node status entry: an item of `GET /agent_run/{id}/nodes` and of a webhook's
    /// `updated_nodes`.
    fn node_view(&self, index: NodeIndex, links: &MediaLinks, now: Timestamp) -> Value {
        let node = &self.nodes[index];
        let status = self.node_status(index);
        let errors: Vec<&String> = self.tasks_of(index).filter_map(|(_, task)| task.error.as_ref()).collect();
        let status_message = match errors.len() {
            0 => None,
            1 => Some(errors[0].clone()),
            count => Some(format!("{count} tasks failed; first: {}", errors[0])),
        };
        json!({
            "agent_node_id": node.agent_node_id,
            "original_node_id": node.original_node_id,
            "node_type": { "node_type_id": node.node_type_id, "node_type_name": node.type_name() },
            "status": status,
            "status_message": status_message,
            "errors": errors,
            "outputs": self.output_views(links, now, Some(index)),
            // Blocked for credits, not for an avatar being processed.
            "needs_credits": self
                .tasks_of(index)
                .any(|(_, task)| task.status == super::TaskStatus::Blocked && task.credits.is_some()),
        })
    }

    /// `GET /agent_run/{id}/nodes`.
    pub fn nodes_view(&self, links: &MediaLinks, now: Timestamp) -> Value {
        let nodes: Vec<Value> = self.node_indexes().map(|index| self.node_view(index, links, now)).collect();
        json!({ "run_id": self.id, "status": self.status.as_str(), "nodes": nodes })
    }

    /// The body of a webhook: the common fields, `sequence` and `occurred_at`, and the
    /// event's own (`inputs`; `updated_nodes` of the nodes given; the outcome). Links
    /// are valid 7 days from `now`, the time of the event.
    pub fn event_payload(
        &self,
        event: crate::domain::webhooks::EventFlag,
        sequence: u64,
        updated_nodes: &[NodeIndex],
        links: &MediaLinks,
        now: Timestamp,
    ) -> Value {
        use crate::domain::webhooks::EventFlag;
        let mut payload = json!({
            "flag": event.as_str(),
            "sequence": sequence,
            "occurred_at": now,
            "agent_id": self.agent_id,
            "run_id": self.id,
            "status": self.status.as_str(),
            "node_status_counts": self.node_status_counts(),
            "triggered_by": self.triggered_by,
        });
        let fields = payload.as_object_mut().unwrap_or_else(|| unreachable!("an object literal"));
        match event {
            EventFlag::RunStarted => {
                fields.insert("inputs".into(), Value::from(self.input_views(links, now)));
            }
            EventFlag::RunProgress => {
                let nodes: Vec<Value> = updated_nodes.iter().map(|index| self.node_view(*index, links, now)).collect();
                fields.insert("updated_nodes".into(), Value::from(nodes));
            }
            EventFlag::RunFinished => {
                fields.insert("status_message".into(), json!(self.status_message));
                fields.insert("needs_credits".into(), json!(self.needs_credits));
                fields.insert("errors".into(), Value::from(self.error_views()));
                fields.insert("inputs".into(), Value::from(self.input_views(links, now)));
                fields.insert("outputs".into(), Value::from(self.output_views(links, now, None)));
                fields.insert("finished_at".into(), json!(self.finished_at));
            }
        }
        payload
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
        let cited = run.sources(&output);
        assert_eq!(
            cited,
            [json!({
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
            })],
            "the input's window ends at its copy's length; the output holds the medium"
        );
    }
}
