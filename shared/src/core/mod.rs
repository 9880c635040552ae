//! Mechanisms with no domain words, shared by every layer above: retry schedules as
//! data and the versioned change that uses them, URL signing, pagination cursors, typed identifiers and lists whose copies share their elements.

pub mod blocking;
pub mod cursor;
pub mod id;
pub mod json;
pub mod queue;
pub mod retry;
pub mod shared_list;
pub mod signing;
pub mod ssrf;
pub mod timeline;
pub mod versioned;
