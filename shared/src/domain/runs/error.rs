//! What can go wrong with a run request.

use super::engine::WrongStatus;
use crate::domain::rejection::{DomainError, Rejection};

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

impl DomainError for RunError {
    fn rejection(self) -> Result<Rejection, anyhow::Error> {
        match self {
            RunError::Invalid(_) => Ok(Rejection::Invalid),
            RunError::AgentNotFound | RunError::NotFound => Ok(Rejection::NotFound),
            RunError::Conflict(_) | RunError::AlreadyStarted => Ok(Rejection::Conflict),
            RunError::Backend(cause) => Err(cause),
        }
    }
}

impl From<WrongStatus> for RunError {
    fn from(error: WrongStatus) -> Self {
        Self::Conflict(error.0)
    }
}
