//! The social endpoints: connections (create, list, delete) and posts (create, list, read with a
//! refresh, approve, reject). Each: auth (bearer or X-API-Key), parse, one domain call,
//! map.

use std::sync::Arc;

use http::StatusCode;

use super::body::json_body;
use super::openapi::prelude::*;
use super::query::query_params;
use super::runs::{links, organization, queues};
use super::{json_response, ApiError, Call, Response};
use crate::app::App;

use crate::domain::social::SocialError;

pub mod parse;
pub mod views;

use parse::cursor_after;

endpoints! {
    // Social posts. A connection is one put (its credentials, for YouTube, a secret of
    // its own in Secrets Manager: the template's policy). A post is its item and its
    // copies per status, platform and connection (puts and deletes of one transaction,
    // with its thumbnail's media record), its media stored in the bucket (the service's
    // own links read from it); publishing is queued on the task queue. A list is one
    // Query of one partition; a read may record the publishers' news (the transaction).
    // The organization's item counts its connections (UpdateItem in the create's
    // transaction: at most 50; started by a Query of them when it has no count yet). A
    // delete deletes the connection's secret, then the connection with the count's
    // decrement (one transaction), then fails its pending posts (Query of its partition,
    // each post's transaction).
    create_social_connection: POST "/social/connections" => "create-social-connection", handler: create_connection,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"], idempotent: true,
        operation(sc): Doc::new("Connect a social account", SOCIAL, BearerOrApiKey)
            .body(sc.of::<parse::ConnectionBody>(), true)
            .answer(201, "The connection (never its credentials)", sc.of::<views::SocialConnection>())
            .general(sc, &[400, 409])
            .idempotent(sc);
    list_social_connections: GET "/social/connections" => "list-social-connections", handler: list_connections,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"],
        operation(sc): Doc::new("The organization's social accounts", SOCIAL, BearerOrApiKey)
            .answer(200, "The connections, oldest first", sc.of::<views::SocialConnectionList>())
            .general(sc, &[]);
    delete_social_connection: DELETE "/social/connections/{social_connection_id}" => "delete-social-connection",
        handler: delete_connection,
        dynamodb: [
            "dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:UpdateItem",
        ],
        operation(sc): Doc::new(
            "Delete a social account: its credentials are deleted and its pending posts' destinations fail",
            SOCIAL,
            BearerOrApiKey,
        )
        .answer(200, "Deleted", sc.of::<s::Success>())
        .general(sc, &[404]);
    create_social_post: POST "/social/post" => "create-social-post", handler: create_post,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem"],
        s3: ["s3:GetObject", "s3:GetObjectVersion", "s3:PutObject"], sqs: ["sqs:SendMessage"] on ["TaskQueue"],
        idempotent: true,
        operation(sc): Doc::new("Post media to social accounts, now or later", SOCIAL, BearerOrApiKey)
            .body(sc.of::<parse::PostBody>(), true)
            .answer(
                201,
                "The post: processing, scheduled, or pending_approval when a destination requires it",
                sc.of::<views::SocialPost>(),
            )
            .general(sc, &[400])
            .idempotent(sc);
    list_social_posts: GET "/social/posts" => "list-social-posts", handler: list_posts,
        dynamodb: ["dynamodb:GetItem", "dynamodb:Query"],
        operation(sc): Doc::new("The organization's social posts, newest first", SOCIAL, BearerOrApiKey)
            .query("limit", integer(1, 100), "Posts per page, 1 to 100 (default 20)")
            .query("cursor", text(4096), "The `next_cursor` of the previous page")
            .query("status", text(32), "Only posts in this status")
            .query("platform", text(32), "Only posts to this platform")
            .query("social_connection_id", uuid(), "Only posts to this connected account")
            .answer(200, "One page, as stored (not refreshed from the platforms)", sc.of::<views::SocialPostPage>())
            .general(sc, &[400]);
    get_social_post: GET "/social/post/{post_id}" => "get-social-post", handler: get_post,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"],
        operation(sc): Doc::new("A social post, refreshed from its platforms", SOCIAL, BearerOrApiKey)
            .answer(200, "The post", sc.of::<views::SocialPost>())
            .general(sc, &[404]);
    approve_social_post: POST "/social/post/{post_id}/approve" => "approve-social-post", handler: approve_post,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"],
        sqs: ["sqs:SendMessage"] on ["TaskQueue"],
        operation(sc): Doc::new("Approve a post pending approval", SOCIAL, BearerOrApiKey)
            .answer(200, "The post, publishing (or scheduled until its time)", sc.of::<views::SocialPost>())
            .general(sc, &[404, 409]);
    reject_social_post: POST "/social/post/{post_id}/reject" => "reject-social-post", handler: reject_post,
        dynamodb: ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"],
        operation(sc): Doc::new("Reject a post pending approval", SOCIAL, BearerOrApiKey)
            .answer(200, "The post, rejected: it is never published", sc.of::<views::SocialPost>())
            .general(sc, &[404, 409]);
}

fn map_error(error: SocialError, action: &'static str) -> ApiError {
    ApiError::refused(error, || format!("Failed to {action}"))
}

/// `POST /social/connections`
pub async fn create_connection(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let new = parse::new_connection(&json_body(&call.request)?)
        .map_err(|error| map_error(error, "connect the social account"))?;
    let connection = app
        .social()
        .create_connection(organization, new)
        .await
        .map_err(|error| map_error(error, "connect the social account"))?;
    Ok(json_response(StatusCode::CREATED, &views::SocialConnection::from(&connection)))
}

/// `GET /social/connections`
pub async fn list_connections(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let connections = app
        .social()
        .list_connections(organization)
        .await
        .map_err(|error| map_error(error, "list the social connections"))?;
    let social_connections = connections.iter().map(views::SocialConnection::from).collect();
    Ok(json_response(StatusCode::OK, &views::SocialConnectionList { social_connections }))
}

/// `DELETE /social/connections/{social_connection_id}`
pub async fn delete_connection(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    app.social()
        .delete_connection(organization, call.params.get("social_connection_id"))
        .await
        .map_err(|error| map_error(error, "delete the social connection"))?;
    Ok(json_response(StatusCode::OK, &s::Success { success: true }))
}

/// `POST /social/post`
pub async fn create_post(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let body = json_body(&call.request)?;
    queues(&app)?;
    let links = links(&app, &call);
    let new = parse::new_post(&body, app.clock.now()).map_err(|error| map_error(error, "create the social post"))?;
    let post = app
        .social()
        .create_post(organization, new, &links)
        .await
        .map_err(|error| map_error(error, "create the social post"))?;
    Ok(json_response(StatusCode::CREATED, &views::SocialPost::new(&post, &links, app.clock.now())))
}

/// `GET /social/posts`
pub async fn list_posts(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let params = query_params(&call.request)?;
    let query = parse::post_query(params.iter().map(|(name, value)| (name.as_str(), value.as_str())))
        .map_err(|error| map_error(error, "list the social posts"))?;
    let (posts, more) = app
        .social()
        .list_posts(organization, &query)
        .await
        .map_err(|error| map_error(error, "list the social posts"))?;
    let (links, now) = (links(&app, &call), app.clock.now());
    let next_cursor = posts.last().filter(|_| more).map(|last| cursor_after(last.id));
    let page = views::SocialPostPage {
        posts: posts.iter().map(|post| views::SocialPost::new(post, &links, now)).collect(),
        pagination: views::PostPagination {
            limit: query.limit as u32,
            returned: posts.len() as u32,
            has_more: more,
            next_cursor,
            sort: "created_at_desc".to_owned(),
        },
    };
    Ok(json_response(StatusCode::OK, &page))
}

/// `GET /social/post/{post_id}`
pub async fn get_post(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let post = app
        .social()
        .get_post(organization, call.params.get("post_id"))
        .await
        .map_err(|error| map_error(error, "read the social post"))?;
    Ok(json_response(StatusCode::OK, &views::SocialPost::new(&post, &links(&app, &call), app.clock.now())))
}

/// `POST /social/post/{post_id}/approve`
pub async fn approve_post(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    queues(&app)?;
    let post = app
        .social()
        .approve(organization, call.params.get("post_id"))
        .await
        .map_err(|error| map_error(error, "approve the social post"))?;
    Ok(json_response(StatusCode::OK, &views::SocialPost::new(&post, &links(&app, &call), app.clock.now())))
}

/// `POST /social/post/{post_id}/reject`
pub async fn reject_post(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let post = app
        .social()
        .reject(organization, call.params.get("post_id"))
        .await
        .map_err(|error| map_error(error, "reject the social post"))?;
    Ok(json_response(StatusCode::OK, &views::SocialPost::new(&post, &links(&app, &call), app.clock.now())))
}
