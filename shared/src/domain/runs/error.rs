//! What can go wrong with a run request.

use super::engine::WrongStatus;

/// Everything that can go wrong with a run request.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The request is refused; the text names the problem (400).
    #[error("{0}")]
    Invalid(String),
    #[error("Agent not found")]
    AgentNotFound,
    #[error("Run not found")]
    NotFound,
    /// A run was already started under the trigger's claim (its due time, its entry).
    #[error("a run was already started for this")]
    AlreadyStarted,
    /// Wrong status for the operation (409).
    #[error("{0}")]
    Conflict(String),
    #[error("storage failed: {0:#}")]
    Backend(#[from] anyhow::Error),
}

impl From<WrongStatus> for RunError {
    fn from(error: WrongStatus) -> Self {
        Self::Conflict(error.0)
    }
}
