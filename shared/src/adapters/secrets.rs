//! Secrets Manager: where a deployment keeps its generation providers' API keys, as one
//! JSON secret (`{"OPENAI_API_KEY": "...", "GEMINI_API_KEY": "..."}`) that node-worker
//! reads when a provider is first used, so no key is ever a plain environment variable.

use aws_sdk_secretsmanager::Client;

use super::dynamodb::{sdk_retry_config, sdk_timeout_config};
use super::LazyClient;
use crate::core::retry::{AWS_ATTEMPT_TIMEOUT, AWS_SDK_CALLS};

fn make_client(shared: &aws_config::SdkConfig) -> Client {
    let config = aws_sdk_secretsmanager::config::Builder::from(shared)
        .retry_config(sdk_retry_config(&AWS_SDK_CALLS))
        .timeout_config(sdk_timeout_config(&AWS_SDK_CALLS, AWS_ATTEMPT_TIMEOUT))
        .build();
    Client::from_conf(config)
}

/// Reads secrets.
#[derive(Clone)]
pub struct SecretsManager {
    client: LazyClient<Client>,
}

impl SecretsManager {
    pub fn from_config(shared: &aws_config::SdkConfig) -> Self {
        Self { client: LazyClient::new(shared) }
    }

    fn client(&self) -> &Client {
        self.client.get(make_client)
    }

    /// The field `field` of the JSON secret `secret` (an ARN or a name).
    pub async fn field(&self, secret: &str, field: &str) -> anyhow::Result<String> {
        let answer = self.client().get_secret_value().secret_id(secret).send().await.map_err(|error| {
            anyhow::anyhow!(
                "reading the secret {secret}: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(&error)
            )
        })?;
        let text = answer.secret_string().ok_or_else(|| anyhow::anyhow!("the secret {secret} holds no text"))?;
        let fields: serde_json::Value = serde_json::from_str(text)
            .map_err(|_| anyhow::anyhow!("the secret {secret} is not a JSON object of keys"))?;
        match fields.get(field).and_then(serde_json::Value::as_str) {
            Some(value) if !value.trim().is_empty() => Ok(value.trim().to_owned()),
            _ => {
                anyhow::bail!("the secret {secret} has no {field}: put it there (aws secretsmanager put-secret-value)")
            }
        }
    }
}

/// Connections' credentials in Secrets Manager: one secret per connection, named
/// `{prefix}/{organization}/{connection}` (the prefix is the deployment's, which its
/// policies name), its text the credentials' JSON; the connection keeps the secret's ARN.
#[derive(Clone)]
pub struct SecretVault {
    secrets: SecretsManager,
    prefix: String,
}

impl SecretsManager {
    /// A vault of connections' credentials under the name prefix `prefix`.
    pub fn vault(&self, prefix: &str) -> SecretVault {
        SecretVault { secrets: self.clone(), prefix: prefix.trim_end_matches('/').to_owned() }
    }
}

#[async_trait::async_trait]
impl crate::domain::social::publisher::CredentialVault for SecretVault {
    async fn put(
        &self,
        name: &str,
        credentials: &serde_json::Map<String, serde_json::Value>,
    ) -> anyhow::Result<String> {
        let secret = format!("{}/{name}", self.prefix);
        let answer = self
            .secrets
            .client()
            .create_secret()
            .name(&secret)
            .secret_string(serde_json::to_string(credentials)?)
            .send()
            .await
            .map_err(|error| {
                anyhow::anyhow!(
                    "keeping the credentials in the secret {secret}: {}",
                    aws_sdk_secretsmanager::error::DisplayErrorContext(&error)
                )
            })?;
        answer.arn().map(str::to_owned).ok_or_else(|| anyhow::anyhow!("the secret {secret} was made without an ARN"))
    }

    async fn get(&self, reference: &str) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
        let answer = self.secrets.client().get_secret_value().secret_id(reference).send().await.map_err(|error| {
            anyhow::anyhow!(
                "reading the credentials in {reference}: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(&error)
            )
        })?;
        let text = answer.secret_string().ok_or_else(|| anyhow::anyhow!("the secret {reference} holds no text"))?;
        serde_json::from_str(text).map_err(|_| anyhow::anyhow!("the secret {reference} is not a JSON object"))
    }

    async fn replace(
        &self,
        reference: &str,
        credentials: &serde_json::Map<String, serde_json::Value>,
    ) -> anyhow::Result<String> {
        self.secrets
            .client()
            .put_secret_value()
            .secret_id(reference)
            .secret_string(serde_json::to_string(credentials)?)
            .send()
            .await
            .map_err(|error| {
                anyhow::anyhow!(
                    "keeping refreshed credentials in {reference}: {}",
                    aws_sdk_secretsmanager::error::DisplayErrorContext(&error)
                )
            })?;
        Ok(reference.to_owned())
    }

    async fn delete(&self, reference: &str) -> anyhow::Result<()> {
        // Without the recovery window: a deleted connection's token must not linger, and
        // a connection made again under the same name needs the name free.
        let deleted =
            self.secrets.client().delete_secret().secret_id(reference).force_delete_without_recovery(true).send().await;
        match deleted {
            Ok(_) => Ok(()),
            Err(error) if error.as_service_error().is_some_and(|error| error.is_resource_not_found_exception()) => {
                Ok(())
            }
            Err(error) => Err(anyhow::anyhow!(
                "deleting the credentials in {reference}: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(&error)
            )),
        }
    }
}
