//! The service's rules: validation, limits and identity, free of HTTP and AWS types.

pub mod agents;
pub mod asset_manager;
pub mod avatars;
pub mod credits;
pub mod dispatch;
pub mod generation;
pub mod graph;
pub mod idempotency;
pub mod identity;
pub mod ids;
pub mod labels;
pub mod media;
pub mod nodes;
pub mod rejection;
pub mod runs;
pub mod shared_stores;
pub mod sites;
pub mod social;
pub mod time;
pub mod triggers;
pub mod uploads;
pub mod webhooks;
pub mod work;
pub mod workspaces;

/// Everything a storage backend implements: adding a backend is implementing each of
/// these (the SQLite and DynamoDB adapters do, one file per context), then this.
pub trait Backend:
    identity::IdentityRepo
    + shared_stores::SharedStoreRepo
    + agents::AgentRepo
    + uploads::UploadRepo
    + runs::ports::RunRepo
    + webhooks::ports::WebhookRepo
    + idempotency::IdempotencyRepo
    + asset_manager::AssetRepo
    + avatars::AvatarRepo
    + credits::CreditRepo
    + triggers::TriggerRepo
    + social::SocialRepo
    + 'static
{
}
