//! Video Input: the video a run is started with. Its task (the input downloaded, probed
//! and cut to its clip window) is the worker's, since every run input takes it.

use serde_json::json;
use uuid::uuid;

use super::schema::{no_rules, node, params_schema};
use super::tile::{CreditCost, NodeKind, NodeType};
use crate::domain::ids::NodeTypeId;

pub const ID: NodeTypeId = NodeTypeId::from_uuid(uuid!("87a28532-ca1d-4652-9a23-a5b9d452e79a"));

pub(super) fn node_type() -> NodeType {
    node(
        ID,
        "Video Input",
        NodeKind::Input,
        params_schema("The video a run is started with; it takes no parameters.", json!({}), no_rules()),
        CreditCost::free(),
    )
}
