//! The local billing sandbox's checkout pages: `GET /billing/sandbox/checkout/{id}` shows
//! the purchase with forms which post to `…/complete` (pay), `…/decline` (pay with a
//! declined card: 402, nothing bought, the checkout stays open) and `…/cancel`;
//! complete and cancel answer 303 to the checkout's `success_url` / `cancel_url` (a plain
//! page when none was given). Once a plan's checkout is paid, its page plays the
//! subscription's outcomes: `…/past_due`, `…/unpaid` (a renewal not paid: no monthly
//! grant), `…/renewal_paid`, `…/end` (the provider ends it: free), `…/card_declines` and
//! `…/card_pays` (top-ups and moves up declined or paid from now).
//! No key is asked for: the checkout's ID is its secret, as a payment page's link is.

use bytes::Bytes;
use http::{header, HeaderValue, Method, StatusCode};

use super::blobs::{full_body, ResponseBody};
use crate::adapters::sandbox_billing::SANDBOX_DECLINE;
use crate::app::App;
use crate::domain::credits::service::{self, CreditError, CreditPorts, SandboxOutcome};
use crate::domain::credits::{Checkout, CheckoutStatus, Purchase};
use crate::domain::ids::CheckoutId;

/// Where the pages are.
pub const PATH_PREFIX: &str = "/billing/sandbox/checkout/";

fn page(status: StatusCode, title: &str, body: &str) -> hyper::Response<ResponseBody> {
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body><h1>{title}</h1>{body}</body></html>"
    );
    let mut response = hyper::Response::new(full_body(Bytes::from(html)));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

fn see_other(location: &str) -> hyper::Response<ResponseBody> {
    let mut response = hyper::Response::new(full_body(Bytes::new()));
    *response.status_mut() = StatusCode::SEE_OTHER;
    match HeaderValue::from_str(location) {
        Ok(value) => {
            response.headers_mut().insert(header::LOCATION, value);
            response
        }
        Err(_) => page(StatusCode::OK, "Done", "<p>The return address could not be used.</p>"),
    }
}

fn what(checkout: &Checkout) -> String {
    match &checkout.purchase {
        Purchase::Plan { plan } => {
            let offer = plan.plan();
            format!("the {} plan: ${} for {} credits a month", plan.as_str(), offer.price_usd, offer.credits_per_month)
        }
        Purchase::TopUp { quantity } => format!("{quantity} credits"),
    }
}

fn failure(error: CreditError) -> hyper::Response<ResponseBody> {
    match error {
        CreditError::NotFound => page(StatusCode::NOT_FOUND, "Checkout not found", "<p>No checkout has this link.</p>"),
        CreditError::Conflict(message) => page(StatusCode::CONFLICT, "Checkout closed", &format!("<p>{message}.</p>")),
        CreditError::PaymentRequired(message) => {
            page(StatusCode::PAYMENT_REQUIRED, "Payment declined", &format!("<p>{message}</p>"))
        }
        other => {
            tracing::error!(error = %other, "a sandbox checkout failed");
            page(StatusCode::INTERNAL_SERVER_ERROR, "Checkout failed", "<p>Try again.</p>")
        }
    }
}

/// A checkout's page: what it buys, its state, and its actions (a paid plan's also
/// plays its subscription's outcomes).
fn checkout_page(checkout: &Checkout) -> hyper::Response<ResponseBody> {
    let id = checkout.id;
    let state = match checkout.status {
        CheckoutStatus::Open => "open",
        CheckoutStatus::Completed => "completed",
        CheckoutStatus::Canceled => "canceled",
        CheckoutStatus::Refunded => "refunded (the organization already had a subscription)",
    };
    let form = |action: &str, label: &str| {
        format!("<form method=\"post\" action=\"{PATH_PREFIX}{id}/{action}\"><button>{label}</button></form>")
    };
    let mut body = format!(
        "<p>Sandbox checkout of {} (no payment is taken). This checkout is {state}.</p>{}{}{}",
        what(checkout),
        form("complete", "Pay"),
        form("decline", "Pay with a declined card"),
        form("cancel", "Cancel"),
    );
    if checkout.status == CheckoutStatus::Completed && matches!(checkout.purchase, Purchase::Plan { .. }) {
        body.push_str("<h2>The subscription</h2>");
        for (action, label) in [
            ("past_due", "Renewal payment failed (past due)"),
            ("unpaid", "Renewal never paid (unpaid)"),
            ("renewal_paid", "Renewal paid"),
            ("end", "Provider ends the subscription"),
            ("card_declines", "Card on file declines"),
            ("card_pays", "Card on file pays"),
        ] {
            body.push_str(&form(action, label));
        }
    }
    page(StatusCode::OK, "Sandbox checkout", &body)
}

/// Answers a request under [`PATH_PREFIX`].
pub async fn handle(app: &App, method: &Method, path: &str) -> hyper::Response<ResponseBody> {
    let rest = path.strip_prefix(PATH_PREFIX).unwrap_or_default();
    let (id, action) = match rest.split_once('/') {
        Some((id, action)) => (id, Some(action)),
        None => (rest, None),
    };
    let Some(id) = CheckoutId::parse(id) else { return failure(CreditError::NotFound) };
    let repo = app.credits().as_ref();
    let ports = CreditPorts { credits: repo, billing: app.billing().as_ref(), clock: app.clock.as_ref() };
    match (method, action) {
        (&Method::GET, None) => match repo.checkout(id).await {
            Ok(Some(checkout)) => checkout_page(&checkout),
            Ok(None) => failure(CreditError::NotFound),
            Err(error) => failure(CreditError::Backend(error)),
        },
        (&Method::POST, Some("complete")) => match service::complete_checkout(&ports, id).await {
            Ok(checkout) if checkout.status == CheckoutStatus::Refunded => page(
                StatusCode::CONFLICT,
                "Refunded",
                "<p>This organization already has a subscription: this one was ended and its payment refunded.</p>",
            ),
            Ok(checkout) => match &checkout.success_url {
                Some(url) => see_other(url),
                None => page(StatusCode::OK, "Payment complete", &format!("<p>Bought {}.</p>", what(&checkout))),
            },
            Err(error) => failure(error),
        },
        (&Method::POST, Some("decline")) => match repo.checkout(id).await {
            Ok(Some(checkout)) if checkout.status == CheckoutStatus::Open => failure(CreditError::PaymentRequired(
                format!("{SANDBOX_DECLINE} Nothing was bought; the checkout is still open."),
            )),
            Ok(Some(_)) => failure(CreditError::Conflict("this checkout is not open".into())),
            Ok(None) => failure(CreditError::NotFound),
            Err(error) => failure(CreditError::Backend(error)),
        },
        (&Method::POST, Some("cancel")) => match service::cancel_checkout(repo, id).await {
            Ok(checkout) => match &checkout.cancel_url {
                Some(url) => see_other(url),
                None => page(StatusCode::OK, "Checkout canceled", "<p>Nothing was bought.</p>"),
            },
            Err(error) => failure(error),
        },
        (&Method::POST, Some(action)) => match SandboxOutcome::parse(action) {
            Some(outcome) => match service::sandbox_outcome(&ports, id, outcome).await {
                Ok(_) => page(StatusCode::OK, "Done", &format!("<p>The sandbox played {action}.</p>")),
                Err(error) => failure(error),
            },
            None => page(StatusCode::NOT_FOUND, "Not found", "<p>No such sandbox action.</p>"),
        },
        _ => page(StatusCode::METHOD_NOT_ALLOWED, "Not allowed", "<p>GET the page; POST one of its actions.</p>"),
    }
}
