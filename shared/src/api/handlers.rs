//! Every endpoint's handler, by function name. A Lambda binary names its own
//! (`shared::api::handlers::whoami`), so it links that handler and what it uses; the
//! local router and the tests look them up with [`of`], which links them all.

use std::sync::Arc;

use super::{
    agents, assets, avatars, credits, identity, openapi, respond, runs, shared_stores, social, triggers, uploads,
    webhooks,
};
use super::{Call, Handler, HandlerFuture};
use crate::app::App;

macro_rules! handlers {
    ($($name:ident = $function:literal => $handler:path),* $(,)?) => {
        $(
            #[doc = concat!("The handler of `", $function, "`.")]
            pub fn $name(app: Arc<App>, call: Call) -> HandlerFuture {
                Box::pin(async move { respond($handler(app, call).await) })
            }
        )*

        /// The handler of the route served by `function`.
        pub fn of(function: &str) -> Option<Handler> {
            match function {
                $($function => Some($name),)*
                _ => None,
            }
        }
    };
}

handlers! {
    whoami = "whoami" => identity::whoami,
    list_shared_stores = "list-shared-stores" => shared_stores::list_stores,
    create_shared_store = "create-shared-store" => shared_stores::create_store,
    rename_shared_store = "rename-shared-store" => shared_stores::rename_store,
    delete_shared_store = "delete-shared-store" => shared_stores::delete_store,
    list_shared_store_entries = "list-shared-store-entries" => shared_stores::list_entries,
    bulk_upsert_shared_store_entries = "bulk-upsert-shared-store-entries" => shared_stores::bulk_upsert,
    get_shared_store_entry = "get-shared-store-entry" => shared_stores::get_entry,
    put_shared_store_entry = "put-shared-store-entry" => shared_stores::put_entry,
    rename_shared_store_entry = "rename-shared-store-entry" => shared_stores::rename_entry,
    delete_shared_store_entry = "delete-shared-store-entry" => shared_stores::delete_entry,
    list_agents = "list-agents" => agents::list_agents,
    create_agent = "create-agent" => agents::create_agent,
    get_agent = "get-agent" => agents::get_agent,
    update_agent = "update-agent" => agents::update_agent,
    duplicate_agent = "duplicate-agent" => agents::duplicate_agent,
    delete_agent = "delete-agent" => agents::delete_agent,
    list_node_types = "list-node-types" => agents::list_node_types,
    get_upload_url = "get-upload-url" => uploads::get_upload_url,
    finalize_upload = "finalize-upload" => uploads::finalize_upload,
    get_upload = "get-upload" => uploads::get_upload,
    create_asset_connection = "create-asset-connection" => assets::create_connection,
    create_asset_item = "create-asset-item" => assets::create_item,
    list_avatar_profiles = "list-avatar-profiles" => avatars::list_profiles,
    create_avatar_profile = "create-avatar-profile" => avatars::create_profile,
    get_avatar_profile = "get-avatar-profile" => avatars::get_profile,
    create_social_connection = "create-social-connection" => social::create_connection,
    list_social_connections = "list-social-connections" => social::list_connections,
    delete_social_connection = "delete-social-connection" => social::delete_connection,
    create_social_post = "create-social-post" => social::create_post,
    list_social_posts = "list-social-posts" => social::list_posts,
    get_social_post = "get-social-post" => social::get_post,
    approve_social_post = "approve-social-post" => social::approve_post,
    reject_social_post = "reject-social-post" => social::reject_post,
    get_plan = "get-plan" => credits::get_plan,
    list_plans = "list-plans" => credits::list_plans,
    upgrade_plan = "upgrade-plan" => credits::upgrade_plan,
    get_credits = "get-credits" => credits::get_credits,
    update_credit_settings = "update-credit-settings" => credits::update_credit_settings,
    list_credit_ledger = "list-credit-ledger" => credits::list_credit_ledger,
    stripe_webhook = "stripe-webhook" => credits::stripe_webhook,
    start_run = "start-run" => runs::start_run,
    get_run = "get-run" => runs::get_run,
    get_run_nodes = "get-run-nodes" => runs::get_run_nodes,
    cancel_run = "cancel-run" => runs::cancel_run,
    resume_run = "resume-run" => runs::resume_run,
    list_agent_runs = "list-agent-runs" => runs::list_agent_runs,
    list_runs = "list-runs" => runs::list_runs,
    fire_trigger = "fire-trigger" => triggers::fire_trigger,
    get_trigger = "get-trigger" => triggers::get_trigger,
    list_trigger_runs = "list-trigger-runs" => triggers::list_trigger_runs,
    list_run_webhooks = "list-run-webhooks" => webhooks::list_deliveries,
    redeliver_run_webhook = "redeliver-run-webhook" => webhooks::redeliver,
    rotate_webhook_secret = "rotate-webhook-secret" => webhooks::rotate_secret,
    delete_webhook_secret = "delete-webhook-secret" => webhooks::delete_secret,
    get_media = "get-media" => runs::get_media,
    get_openapi = "get-openapi" => openapi::get_document,
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_route_has_its_handler() {
        for route in super::super::ROUTES {
            assert!(super::of(route.function).is_some(), "{} has no handler", route.function);
        }
        assert!(super::of("serve").is_none());
    }
}
