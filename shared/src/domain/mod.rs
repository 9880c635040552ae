//! The service's rules: validation, limits and identity, free of HTTP and AWS types.

pub mod agents;
pub mod graph;
pub mod identity;
pub mod node_types;
pub mod shared_stores;
pub mod time;
pub mod uploads;
pub mod workspaces;
