//! Every request logs one line inside a span that carries its request ID and, once the
//! key is verified, its organization ID.

use std::io::Write;
use std::sync::{Arc, Mutex};

use http::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::{Backend, TestApp};

/// Log output collected in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The JSON lines whose message is "request".
    fn request_lines(&self) -> Vec<Value> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["fields"]["message"] == "request")
            .collect()
    }
}

// One thread: the subscriber set here sees everything the request does on it.
#[tokio::test(flavor = "current_thread")]
async fn each_request_logs_one_line_with_its_request_id_and_organization() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber =
        tracing_subscriber::fmt().json().with_current_span(true).with_writer(move || writer.clone()).finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let app = TestApp::new(Backend::Sqlite).await;
    let authorization = format!("Bearer {}", app.key);
    let (status, _) =
        app.raw(Method::GET, "/whoami", &[("authorization", &authorization), ("x-request-id", "req-42")], vec![]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = app.raw(Method::GET, "/whoami", &[("authorization", "Bearer wrong")], vec![]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let lines = captured.request_lines();
    assert_eq!(lines.len(), 2, "one line per request: {lines:?}");
    let span = &lines[0]["span"];
    assert_eq!(span["request_id"], "req-42");
    assert_eq!(span["organization_id"], app.organization.to_string());
    assert_eq!(span["function"], "whoami");
    assert_eq!(lines[0]["fields"]["status"], 200);
    let refused = &lines[1]["span"];
    assert!(refused["request_id"].as_str().is_some_and(|id| uuid::Uuid::parse_str(id).is_ok()), "a new ID: {refused}");
    assert!(refused["organization_id"].is_null(), "no organization for a refused key: {refused}");
}
