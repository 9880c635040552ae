//! The service's rules: validation, limits and identity, free of HTTP and AWS types.

pub mod agents;
pub mod asset_manager;
pub mod graph;
pub mod idempotency;
pub mod identity;
pub mod media;
pub mod node_types;
pub mod runs;
pub mod shared_stores;
pub mod sites;
pub mod time;
pub mod uploads;
pub mod webhooks;
pub mod workspaces;

/// Longest stored name or label (store names, display names, `source_type`, seeded
/// names) where the contract sets no smaller limit: with entry IDs of at most 1,024 bytes
/// and metadata of at most 256,000 bytes, every stored item stays under DynamoDB's 400 KB.
pub const MAX_LABEL_CHARS: usize = 1_000;
