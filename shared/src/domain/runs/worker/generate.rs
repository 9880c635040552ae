//! A generation node's task: its provider makes the media from the node's parameters
//! into the task's scratch folder; the worker then probes and stores it like a render.

use std::path::Path;

use super::execute::{Made, Stop};
use super::Worker;
use crate::domain::generation::GenerationError;
use crate::domain::media::MediaType;
use crate::domain::nodes::Generation;
use crate::domain::runs::{NodeIndex, Run, TaskIndex};

impl Worker {
    /// Task `index` of a generation node: the file its provider made, with the
    /// provider's name; a provider's refusal fails the task with the provider's message.
    pub(super) async fn generate_task(
        &self,
        run: &Run,
        index: TaskIndex,
        scratch: &Path,
        stop: &Stop,
    ) -> anyhow::Result<Made> {
        let node = *run.tasks[index].nodes.first().unwrap_or(&NodeIndex(0));
        let Some(generation) = run.nodes[node].settings().generation() else {
            return Ok(Made::FailedAt(format!("{} needs its parameters set", run.nodes[node].type_name()), node));
        };
        let media = generation.media();
        let output = scratch.join(format!("generated.{}", media.extension()));
        let made = match &generation {
            Generation::Image(request) => {
                let provider = &self.generators.image;
                (provider.name().to_owned(), provider.generate(request, &output, stop).await)
            }
            Generation::Video(request) => {
                let provider = self.generators.video_for(&request.model);
                (provider.name().to_owned(), provider.generate(request, &output, stop).await)
            }
            Generation::Audio(request) => {
                let provider = &self.generators.audio;
                (provider.name().to_owned(), provider.generate(request, &output, stop).await)
            }
            Generation::Avatar { profile, .. } => {
                return Ok(Made::FailedAt(format!("AI Avatar: avatar profile {profile} was not found"), node));
            }
        };
        Ok(match made {
            (provider, Ok(())) => Made::Generated { path: output, media, provider },
            (_, Err(GenerationError::Cancelled)) => Made::Cancelled,
            // An unreachable provider or a missing tool fails the node saying so; a
            // resume tries again.
            (_, Err(error)) => Made::FailedAt(error.to_string(), node),
        })
    }
}

/// What the probe of a generated file must find, by what it should hold.
pub(super) fn expected(media: MediaType) -> &'static str {
    match media {
        MediaType::Video => "video",
        MediaType::Image => "image",
        MediaType::Audio => "sound",
    }
}
