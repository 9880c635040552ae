//! The AWS settings of a Lambda function, read from the environment Lambda gives every
//! function: its region, its execution role's credentials, and the endpoint overrides
//! the SDKs read (`AWS_ENDPOINT_URL_<SERVICE>`, then `AWS_ENDPOINT_URL`).
//!
//! `aws_config::load_defaults` would also link its whole default chain (profiles, SSO,
//! STS web identity, IMDS, container credentials) into every function, which never uses
//! it; `serve --backend aws` on a laptop keeps that chain ([`load_defaults`]).
//!
//! Every client speaks HTTPS through [`https_client`]: the SDK's hyper and rustls
//! connector, on the ring provider that reqwest's rustls already uses, where the SDK's
//! default would compile aws-lc too.

use aws_config::environment::EnvironmentVariableCredentialsProvider;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_smithy_http_client::proxy::ProxyConfig;
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use aws_smithy_http_client::{Builder, ConnectorBuilder};
use aws_types::sdk_config::{SharedCredentialsProvider, SharedHttpClient};
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};

/// The HTTPS client of every AWS SDK client: what the SDK's `default-https-client` builds
/// (its connector settings and sleep, proxies from the environment, the system's root
/// certificates), with rustls on ring.
pub fn https_client() -> SharedHttpClient {
    Builder::new().build_with_connector_fn(|settings, components| {
        let mut connector = ConnectorBuilder::default().tls_provider(Provider::Rustls(CryptoMode::Ring));
        connector.set_connector_settings(settings.cloned());
        if let Some(components) = components {
            connector.set_sleep_impl(components.sleep_impl());
        }
        connector.set_proxy_config(Some(ProxyConfig::from_env()));
        connector.build()
    })
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
