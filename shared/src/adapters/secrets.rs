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
