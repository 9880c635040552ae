//! The avatar profile endpoints: list, create (201, processing queued) and read. Each:
//! auth (bearer or X-API-Key), parse, one domain call, map.

use std::sync::Arc;

use http::StatusCode;

use super::body::json_body;
use super::openapi::prelude::*;
use super::query::query_params;
use super::runs::{links, organization, queues};
use super::{json_response, ApiError, Call, Response};
use crate::app::{App, Queues};
use crate::domain::avatars::{self, AvatarError, AvatarPorts};

pub mod parse;
pub mod views;

endpoints! {
    // Avatar profiles: the primary workspace is read (Query); a create (which makes the
    // primary workspace of an organization that has none) claims its name and stores the
    // profile in one transaction of puts, and queues its processing on the task queue.
    // Every profile (no `limit`) may be more than a Lambda response holds.
    list_avatar_profiles: GET "/avatar-profiles" => "list-avatar-profiles", handler: list_profiles,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"], s3: ["s3:PutObject", "s3:GetObject"], large_responses: true,
        operation(sc): {
            Doc::new("List the avatar profiles of the primary workspace", AVATARS, BearerOrApiKey)
                .query(
                    "limit",
                    integer(1, 100),
                    "Profiles per page, 1 to 100; without it (and without `cursor`) every profile",
                )
                .query("cursor", text(4096), "The `next_cursor` of the previous page")
                .answer(200, "The profiles, newest first (`next_cursor` when paged)", sc.of::<views::AvatarProfileList>())
                .large(sc)
                .general(sc, &[400])
        };
    create_avatar_profile: POST "/avatar-profiles/create" => "create-avatar-profile", handler: create_profile,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"],
        sqs: ["sqs:SendMessage"] on ["TaskQueue"], idempotent: true,
        operation(sc): Doc::new("Create an avatar profile; its processing starts", AVATARS, BearerOrApiKey)
            .body(sc.of::<parse::CreateBody>(), true)
            .answer(201, "The profile, pending", sc.of::<views::AvatarProfile>())
            .general(sc, &[400, 409])
            .idempotent(sc);
    get_avatar_profile: GET "/avatar-profiles/{id}" => "get-avatar-profile", handler: get_profile,
        dynamodb: ["dynamodb:GetItem"],
        operation(sc): Doc::new("Read an avatar profile", AVATARS, BearerOrApiKey)
            .answer(200, "The profile", sc.of::<views::AvatarProfile>())
            .general(sc, &[404]);
}

fn ports<'a>(app: &'a App, queues: &'a Queues) -> AvatarPorts<'a> {
    AvatarPorts {
        avatars: app.avatars().as_ref(),
        uploads: app.uploads().as_ref(),
        identity: app.identity().as_ref(),
        queue: queues.tasks.as_ref(),
        clock: app.clock.as_ref(),
    }
}

fn map_error(error: AvatarError, action: &'static str) -> ApiError {
    ApiError::refused(error, || format!("Failed to {action} the avatar profile"))
}

/// `GET /avatar-profiles`
pub async fn list_profiles(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let params = query_params(&call.request)?;
    let page = parse::list_page(params.iter().map(|(name, value)| (name.as_str(), value.as_str())))
        .map_err(|error| map_error(error, "list"))?;
    let (profiles, next_cursor) = avatars::list(app.avatars().as_ref(), app.identity().as_ref(), organization, &page)
        .await
        .map_err(|error| map_error(error, "list"))?;
    let (links, now) = (links(&app, &call), app.clock.now());
    let avatar_profiles = profiles.iter().map(|profile| views::AvatarProfile::new(profile, &links, now)).collect();
    // The contract's list (no limit, no cursor) is `{avatar_profiles}` alone.
    let next_cursor = page.paged().then_some(next_cursor);
    Ok(json_response(StatusCode::OK, &views::AvatarProfileList { avatar_profiles, next_cursor }))
}

/// `POST /avatar-profiles/create`
pub async fn create_profile(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let body = json_body(&call.request)?;
    let queues = queues(&app)?;
    let new = parse::new_avatar(&body).map_err(|error| map_error(error, "create"))?;
    let profile =
        avatars::create(&ports(&app, queues), organization, new).await.map_err(|error| map_error(error, "create"))?;
    Ok(json_response(StatusCode::CREATED, &views::AvatarProfile::new(&profile, &links(&app, &call), app.clock.now())))
}

/// `GET /avatar-profiles/{id}`
pub async fn get_profile(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let profile = avatars::get(app.avatars().as_ref(), organization, call.params.get("id"))
        .await
        .map_err(|error| map_error(error, "read"))?;
    Ok(json_response(StatusCode::OK, &views::AvatarProfile::new(&profile, &links(&app, &call), app.clock.now())))
}
