//! What the benches share: an embedded application with one seeded organization, and
//! requests through the same router `serve` uses.

use std::sync::Arc;

use http::Method;
use serde_json::Value;
use shared::api::{self, Body, Response};
use shared::app::App;
use shared::domain::identity::{apply_seed, Seed};

/// The bench organization's API key.
const KEY: &str = "bench-key";

/// An embedded application (in-memory SQLite) on a current-thread runtime.
pub struct BenchApp {
    pub runtime: tokio::runtime::Runtime,
    app: Arc<App>,
}

impl BenchApp {
    /// A fresh application with one organization.
    pub fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let app = Arc::new(App::embedded().unwrap());
        let seed = Seed::from_json(&format!(
            r#"{{"organizations":[{{"id":"6f1c7f52-52d3-4a8e-9d47-2d0f4a6f4e01","name":"B","slug":"b","api_keys":["{KEY}"]}}]}}"#
        ))
        .unwrap();
        runtime
            .block_on(apply_seed(app.identity().as_ref(), app.credits().as_ref(), app.clock.as_ref(), &seed))
            .unwrap();
        Self { runtime, app }
    }

    /// Sends one request as the organization and waits for its response.
    pub fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Response {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {KEY}"))
            .body(Body::from(body.map(|body| body.to_string().into_bytes()).unwrap_or_default()))
            .unwrap();
        self.runtime.block_on(api::dispatch(self.app.clone(), request))
    }

    /// Sends one request and parses its JSON answer.
    pub fn json(&self, method: Method, path: &str, body: Option<&Value>) -> Value {
        serde_json::from_slice(self.send(method, path, body).body()).unwrap()
    }
}
