//! Why the domain refuses a request, in the words every context shares. Each context's
//! error says which of these it is ([`DomainError`]); the edge gives each its HTTP status
//! once (`api::ApiError::refused`), so that no context maps statuses of its own.

/// A refusal of the caller's request (the error's message says why).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The request is malformed or breaks a rule (400).
    Invalid,
    /// The plan does not allow it (403).
    Forbidden,
    /// Not found, or another organization's (404).
    NotFound,
    /// It conflicts with the state of what it changes, or a limit (409).
    Conflict,
    /// The payment was declined; nothing changed (402).
    PaymentRequired,
    /// Held until a provider confirms it: the request may be sent again (503).
    Pending,
}

/// A context's error: a [`Rejection`] of the caller's request, or a failure of ours
/// (storage, a dependency), whose cause is logged and not shown.
pub trait DomainError: std::fmt::Display {
    /// The rejection this error is, or the cause of a failure of ours.
    fn rejection(self) -> Result<Rejection, anyhow::Error>;
}
