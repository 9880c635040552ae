//! The typed identifiers of every context, in one module at the bottom of the domain:
//! a context names another's things by their IDs without importing that context.

crate::typed_id!(
    /// Identifies an agent. Agents get version 7 IDs, so their order is creation order.
    AgentId
);
crate::typed_id!(
    /// Identifies an asset-manager connection.
    AssetConnectionId
);
crate::typed_id!(
    /// Identifies an item of an asset manager (the contract's "UUID of the external item").
    AssetItemId
);
crate::typed_id!(
    /// Identifies an avatar profile (version 7: later profiles sort after earlier ones).
    AvatarProfileId
);
crate::typed_id!(
    /// Identifies a ledger entry.
    LedgerEntryId
);
crate::typed_id!(
    /// Identifies a checkout (a plan purchase the caller completes at its URL).
    CheckoutId
);
crate::typed_id!(
    /// Identifies a node of an agent's graph (`agent_node_id`).
    AgentNodeId
);
crate::typed_id!(
    /// Identifies an organization: the owner of every resource an API key can reach.
    OrganizationId
);
crate::typed_id!(
    /// Identifies a node type of the catalog; the IDs never change once published.
    NodeTypeId
);
crate::typed_id!(
    /// Identifies a run.
    RunId
);
crate::typed_id!(
    /// Identifies a stored media file reachable through a signed `/media/{id}` link: a
    /// run output (its render ID), a thumbnail or a run input.
    MediaId
);
crate::typed_id!(
    /// Identifies one version of a run's runtime state; resume makes a new one.
    AgentStateId
);
crate::typed_id!(
    /// Identifies a shared store.
    StoreId
);
crate::typed_id!(
    /// Identifies a connected social account (version 7: later connections sort after).
    SocialConnectionId
);
crate::typed_id!(
    /// Identifies a social post (version 7 of its creation time: key order is creation order).
    PostId
);
crate::typed_id!(
    /// Identifies an upload (and the asset it becomes).
    UploadId
);
crate::typed_id!(
    /// Identifies one webhook delivery: its `webhook-id`, the same on every attempt.
    DeliveryId
);
crate::typed_id!(
    /// Identifies a workspace of an organization.
    WorkspaceId
);

/// The position of a task in a run's tasks; stored and sent as a plain number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct TaskIndex(pub usize);

impl std::fmt::Display for TaskIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
