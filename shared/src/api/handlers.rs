//! Every endpoint's handler, by function name. A Lambda binary names its own
//! (`shared::api::handlers::whoami`), so it links that handler and what it uses; the
//! local router and the tests look them up with [`of`], which links them all. Each is
//! declared with its endpoint, in its context's api module (`endpoints!`).

pub use super::agents::endpoints::*;
pub use super::assets::endpoints::*;
pub use super::avatars::endpoints::*;
pub use super::credits::endpoints::*;
pub use super::identity::endpoints::*;
pub use super::media::endpoints::*;
pub use super::openapi::endpoints::*;
pub use super::runs::endpoints::*;
pub use super::shared_stores::endpoints::*;
pub use super::social::endpoints::*;
pub use super::triggers::endpoints::*;
pub use super::uploads::endpoints::*;
pub use super::webhooks::endpoints::*;
use super::{
    agents, assets, avatars, credits, identity, media, openapi, runs, shared_stores, social, triggers, uploads,
    webhooks, Handler,
};

/// Each context's handlers, in the routes table's order.
const CONTEXT_HANDLERS: [fn(&str) -> Option<Handler>; 13] = [
    identity::handler_of,
    shared_stores::handler_of,
    agents::handler_of,
    uploads::handler_of,
    assets::handler_of,
    avatars::handler_of,
    social::handler_of,
    credits::handler_of,
    runs::handler_of,
    triggers::handler_of,
    webhooks::handler_of,
    media::handler_of,
    openapi::handler_of,
];

/// The handler of the route served by `function`.
pub fn of(function: &str) -> Option<Handler> {
    CONTEXT_HANDLERS.iter().find_map(|handler_of| handler_of(function))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_route_has_its_handler() {
        for route in super::super::ROUTES.iter() {
            assert!(super::of(route.function).is_some(), "{} has no handler", route.function);
        }
        assert!(super::of("serve").is_none());
    }
}
