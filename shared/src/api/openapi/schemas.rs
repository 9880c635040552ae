//! The schemas every context shares. Each context's api module holds its own: the
//! answers are the types its handlers serialize (views in `api::*` and `domain::*`, with
//! `utoipa::ToSchema`), and its request bodies are declared beside the parser that
//! reads them (`Request bodies` in each module), so a field is documented where it is
//! read or written. Schemathesis checks in CI that every answer conforms.
//!
//! Bodies the service reads are closed (`deny_unknown_fields` → `additionalProperties:
//! false`): every handler refuses a property it does not know, naming it. Answers are
//! closed too, so that a field added without being documented fails the fuzzer. An
//! `Option` is nullable; one that may be left out but never null carries
//! `nullable = false`; a field always present, possibly null, is `required = true`.

/// An ISO 8601 UTC date-time with milliseconds, e.g. `2026-01-31T12:00:00.000Z`: the
/// domain's timestamp, documented as the component `Time`.
pub use crate::domain::time::Timestamp as Time;

/// The bodies `api::error::ApiError` and the large-response redirect serialize, and the
/// answer of a delete.
pub use crate::api::error::{Detail, LargeResponse, StoreErrorBody, StoreRefusal};
pub use crate::api::Success;
