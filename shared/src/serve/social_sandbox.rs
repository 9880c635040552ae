//! The sandbox publisher's post pages: `GET /sandbox/social/{organization}/{post}/{connection}`
//! shows what was posted there (the account, the description, the thumbnail and the
//! number of media the sandbox keeps), as a platform's post page would. A post that the
//! sandbox has not posted to that connection is a 404.

use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};

use super::blobs::{full_body, ResponseBody};
use crate::adapters::sandbox_social::SANDBOX_PATH_PREFIX;
use crate::app::App;
use crate::domain::ids::OrganizationId;
use crate::domain::ids::{PostId, SocialConnectionId};
use crate::domain::social::{PublisherKind, ResultStatus};

/// Escapes text for HTML.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn page(status: StatusCode, title: &str, body: &str) -> hyper::Response<ResponseBody> {
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title></head><body><h1>{}</h1>{body}</body></html>",
        escape(title),
        escape(title)
    );
    let mut response = hyper::Response::new(full_body(Bytes::from(html)));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

fn not_found() -> hyper::Response<ResponseBody> {
    page(StatusCode::NOT_FOUND, "Post not found", "<p>The sandbox has no post at this address.</p>")
}

/// Answers a GET under [`SANDBOX_PATH_PREFIX`].
pub async fn handle(app: &App, path: &str) -> hyper::Response<ResponseBody> {
    let rest = path.strip_prefix(SANDBOX_PATH_PREFIX).unwrap_or_default();
    let parts: Vec<&str> = rest.split('/').collect();
    let [organization, post, connection] = parts.as_slice() else { return not_found() };
    let (Some(organization), Some(post), Some(connection)) =
        (OrganizationId::parse(organization), PostId::parse(post), SocialConnectionId::parse(connection))
    else {
        return not_found();
    };
    let post = match app.social_posts().get_post(organization, post).await {
        Ok(Some(post)) => post,
        Ok(None) => return not_found(),
        Err(error) => {
            tracing::error!(error = %format!("{error:#}"), "a sandbox post page could not be read");
            return page(StatusCode::INTERNAL_SERVER_ERROR, "Post unavailable", "<p>Try again.</p>");
        }
    };
    let posted = post.destinations.iter().zip(&post.results).find(|(destination, result)| {
        destination.connection.id == connection
            && destination.connection.publisher == PublisherKind::Sandbox
            && result.status == ResultStatus::Success
    });
    let Some((destination, _)) = posted else { return not_found() };
    let account = &destination.connection;
    let thumbnail = app.links.link(post.thumbnail, app.clock.now());
    let body = format!(
        "<p>Posted to {} as {} (@{}) in the sandbox on {}.</p><p>{}</p><img src=\"{}\" alt=\"thumbnail\">\
         <p>{} media kept by the sandbox.</p>",
        account.platform.as_str(),
        escape(&account.account_name),
        escape(&account.account_username),
        post.updated_at,
        escape(&post.description),
        escape(&thumbnail),
        post.media.len()
    );
    page(StatusCode::OK, "Sandbox post", &body)
}
