//! The AWS settings of a Lambda function, read from the environment Lambda gives every
//! function: its region, its execution role's credentials, and the endpoint overrides
//! the SDKs read (`AWS_ENDPOINT_URL_<SERVICE>`, then `AWS_ENDPOINT_URL`).
//!
//! `aws_config::load_defaults` would also link its whole default chain (profiles, SSO,
//! STS web identity, IMDS, container credentials) into every function, which never uses
//! it; `serve --backend aws` on a laptop keeps that chain ([`load_defaults`]).
//!
//! Every client speaks HTTPS through [`https_client`]: reqwest (HTTP/1.1, rustls on ring,
//! the system's root certificates), which the service already uses for downloads and
//! webhooks. The SDK's default client would add hyper's HTTP/2 and a second TLS stack on
//! aws-lc to every function.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::environment::EnvironmentVariableCredentialsProvider;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_types::sdk_config::{SharedCredentialsProvider, SharedHttpClient};
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};

/// The HTTP client of every AWS SDK client.
pub fn https_client() -> SharedHttpClient {
    SharedHttpClient::new(ReqwestClient::default())
}

/// A connector's connect and read timeouts.
type Timeouts = (Option<Duration>, Option<Duration>);

/// Hands the SDK one reqwest client per connector settings (its timeouts), made on
/// first use and kept; reqwest pools the connections.
#[derive(Debug, Default)]
struct ReqwestClient {
    connectors: Mutex<HashMap<Timeouts, SharedHttpConnector>>,
}

impl HttpClient for ReqwestClient {
    fn http_connector(&self, settings: &HttpConnectorSettings, _: &RuntimeComponents) -> SharedHttpConnector {
        let key = (settings.connect_timeout(), settings.read_timeout());
        let mut connectors = self.connectors.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        connectors
            .entry(key)
            .or_insert_with(|| {
                let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
                if let Some(timeout) = key.0 {
                    builder = builder.connect_timeout(timeout);
                }
                if let Some(timeout) = key.1 {
                    builder = builder.read_timeout(timeout);
                }
                SharedHttpConnector::new(ReqwestConnector(
                    builder.build().map_err(|error| Arc::from(with_causes(&error))),
                ))
            })
            .clone()
    }
}

/// Sends the SDK's requests; a client that could not be built (no TLS roots readable)
/// fails each call with why.
#[derive(Debug)]
struct ReqwestConnector(Result<reqwest::Client, Arc<str>>);

impl HttpConnector for ReqwestConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = self.0.clone();
        HttpConnectorFuture::new(async move {
            let client = client.map_err(|reason| ConnectorError::other(reason.to_string().into(), None))?;
            let request = request.try_into_http1x().map_err(|error| ConnectorError::user(error.into()))?;
            let request = reqwest::Request::try_from(request.map(reqwest::Body::wrap))
                .map_err(|error| ConnectorError::user(error.into()))?;
            let response = client.execute(request).await.map_err(connector_error)?;
            let response = http::Response::from(response).map(SdkBody::from_body_1_x);
            HttpResponse::try_from(response).map_err(|error| ConnectorError::other(error.into(), None))
        })
    }
}

/// An error and its causes, as one line.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// How the SDK's retries read a failed call: timeouts, and connections that failed or
/// closed before the answer (reqwest's request and body errors, which include a reset
/// mid-request) are transient and retried, as the SDK's own client classifies them;
/// anything else is not.
fn connector_error(error: reqwest::Error) -> ConnectorError {
    if error.is_timeout() {
        ConnectorError::timeout(error.into())
    } else if error.is_connect() || error.is_request() || error.is_body() {
        ConnectorError::io(error.into())
    } else {
        ConnectorError::other(error.into(), None)
    }
}

/// The SDK's default settings chain (environment, profiles, SSO, IMDS …) with
/// [`https_client`]: what `serve --backend aws`, the tools and the tests use.
pub async fn load_defaults() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest()).http_client(https_client()).load().await
}

/// The settings of a Lambda function's clients; a missing region is refused here, and
/// missing credentials on the first call.
pub fn lambda_settings() -> anyhow::Result<SdkConfig> {
    let region = ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
        .ok_or_else(|| anyhow::anyhow!("AWS_REGION is not set (Lambda sets it for every function)"))?;
    Ok(SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .credentials_provider(SharedCredentialsProvider::new(EnvironmentVariableCredentialsProvider::new()))
        .http_client(https_client())
        .service_config(EnvironmentSettings)
        .build())
}

/// Per-service settings from environment variables, as the SDKs name them.
#[derive(Debug)]
struct EnvironmentSettings;

impl LoadServiceConfig for EnvironmentSettings {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        service_setting(key.env(), key.service_id(), |name| std::env::var(name).ok())
    }
}

/// `<setting>_<SERVICE ID>` (the service ID upper-cased, spaces as underscores), else
/// `<setting>`; empty values count as unset.
fn service_setting(setting: &str, service_id: &str, read: impl Fn(&str) -> Option<String>) -> Option<String> {
    let specific = format!("{setting}_{}", service_id.to_uppercase().replace(' ', "_"));
    let value = [specific.as_str(), setting].into_iter().find_map(|name| read(name).filter(|value| !value.is_empty()));
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_endpoint_comes_before_the_global_one() {
        let env = |values: &'static [(&'static str, &'static str)]| {
            move |name: &str| values.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_string())
        };
        let both = &env(&[("AWS_ENDPOINT_URL", "http://all"), ("AWS_ENDPOINT_URL_DYNAMODB", "http://dynamo")]);
        assert_eq!(service_setting("AWS_ENDPOINT_URL", "DynamoDB", both).as_deref(), Some("http://dynamo"));
        assert_eq!(service_setting("AWS_ENDPOINT_URL", "S3", both).as_deref(), Some("http://all"));
        let spaced = &env(&[("AWS_ENDPOINT_URL_ELASTIC_BEANSTALK", "http://eb"), ("AWS_ENDPOINT_URL_SQS", "")]);
        assert_eq!(service_setting("AWS_ENDPOINT_URL", "Elastic Beanstalk", spaced).as_deref(), Some("http://eb"));
        assert_eq!(service_setting("AWS_ENDPOINT_URL", "SQS", spaced), None, "empty is unset");
    }
}
