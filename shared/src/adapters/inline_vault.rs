//! The local credential vault: the reference is the credentials themselves, kept in the
//! embedded backend's database (AWS keeps them in Secrets Manager, `adapters::secrets`).

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::domain::social::publisher::CredentialVault;

/// The local vault: the reference is the credentials themselves (the embedded backend's
/// database is the only copy, as for every other local secret).
pub struct InlineVault;

/// The prefix of an inline reference.
const INLINE: &str = "inline:";

#[async_trait]
impl CredentialVault for InlineVault {
    async fn put(&self, _name: &str, credentials: &Map<String, Value>) -> anyhow::Result<String> {
        Ok(format!("{INLINE}{}", serde_json::to_string(credentials)?))
    }

    async fn get(&self, reference: &str) -> anyhow::Result<Map<String, Value>> {
        let text = reference
            .strip_prefix(INLINE)
            .ok_or_else(|| anyhow::anyhow!("a credential reference that is not inline reached the local vault"))?;
        Ok(serde_json::from_str(text)?)
    }

    async fn replace(&self, _reference: &str, credentials: &Map<String, Value>) -> anyhow::Result<String> {
        Ok(format!("{INLINE}{}", serde_json::to_string(credentials)?))
    }

    async fn delete(&self, _reference: &str) -> anyhow::Result<()> {
        // The reference is the only copy: it goes with the connection's record.
        Ok(())
    }
}
