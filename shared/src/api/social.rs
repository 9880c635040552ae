//! The social endpoints: connections (create, list, delete) and posts (create, list, read with a
//! refresh, approve, reject). Each: auth (bearer or X-API-Key), parse, one domain call,
//! map.

use std::sync::Arc;

use http::StatusCode;
use serde_json::{json, Value};

use super::body::json_body;
use super::query::query_params;
use super::runs::{links, organization, queues};
use super::{json_response, ApiError, Call, Response};
use crate::app::App;
use crate::domain::social::parse::{self, cursor_after};
use crate::domain::social::{self, SocialError};

fn map_error(error: SocialError, action: &'static str) -> ApiError {
    let message = error.to_string();
    match error {
        SocialError::Invalid(_) => ApiError::detail(StatusCode::BAD_REQUEST, message),
        SocialError::NotFound(_) => ApiError::detail(StatusCode::NOT_FOUND, message),
        SocialError::Conflict(_) => ApiError::detail(StatusCode::CONFLICT, message),
        SocialError::Backend(cause) => ApiError::backend(&cause, format!("Failed to {action}")),
    }
}

/// `POST /social/connections`
pub async fn create_connection(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let body = json_body(&call.request)?;
    let connection = app
        .social()
        .create_connection(organization, &body)
        .await
        .map_err(|error| map_error(error, "connect the social account"))?;
    Ok(json_response(StatusCode::CREATED, &social::connection_view(&connection)))
}

/// `GET /social/connections`
pub async fn list_connections(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let connections = app
        .social()
        .list_connections(organization)
        .await
        .map_err(|error| map_error(error, "list the social connections"))?;
    let views: Vec<Value> = connections.iter().map(social::connection_view).collect();
    Ok(json_response(StatusCode::OK, &json!({ "social_connections": views })))
}

/// `DELETE /social/connections/{social_connection_id}`
pub async fn delete_connection(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    app.social()
        .delete_connection(organization, call.params.get("social_connection_id"))
        .await
        .map_err(|error| map_error(error, "delete the social connection"))?;
    Ok(json_response(StatusCode::OK, &json!({ "success": true })))
}

/// `POST /social/post`
pub async fn create_post(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let body = json_body(&call.request)?;
    queues(&app)?;
    let links = links(&app, &call);
    let post = app
        .social()
        .create_post(organization, &body, &links)
        .await
        .map_err(|error| map_error(error, "create the social post"))?;
    Ok(json_response(StatusCode::CREATED, &social::post_view(&post, &links, app.clock.now())))
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
    let views: Vec<Value> = posts.iter().map(|post| social::post_view(post, &links, now)).collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "posts": views,
            "pagination": {
                "limit": query.limit,
                "returned": posts.len(),
                "has_more": more,
                "next_cursor": next_cursor,
                "sort": "created_at_desc",
            },
        }),
    ))
}

/// `GET /social/post/{post_id}`
pub async fn get_post(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let post = app
        .social()
        .get_post(organization, call.params.get("post_id"))
        .await
        .map_err(|error| map_error(error, "read the social post"))?;
    Ok(json_response(StatusCode::OK, &social::post_view(&post, &links(&app, &call), app.clock.now())))
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
    Ok(json_response(StatusCode::OK, &social::post_view(&post, &links(&app, &call), app.clock.now())))
}

/// `POST /social/post/{post_id}/reject`
pub async fn reject_post(app: Arc<App>, call: Call) -> Result<Response, ApiError> {
    let organization = organization(&app, &call).await?;
    let post = app
        .social()
        .reject(organization, call.params.get("post_id"))
        .await
        .map_err(|error| map_error(error, "reject the social post"))?;
    Ok(json_response(StatusCode::OK, &social::post_view(&post, &links(&app, &call), app.clock.now())))
}
