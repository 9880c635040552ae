//! An agent's graph of nodes and connections, and the ordered operations that edit it.
//! Operations apply to a copy, so a payload applies whole or not at all.

use std::collections::{HashMap, HashSet};

use super::nodes::{self, NodeType};
pub use crate::domain::ids::AgentNodeId;
use crate::domain::ids::NodeTypeId;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Operations one update may carry.
pub const MAX_OPERATIONS: usize = 1_000;
/// Nodes one agent may have.
pub const MAX_NODES: usize = 300;
/// Trigger nodes one agent may have (their states are saved with the graph, in one
/// atomic write).
pub const MAX_TRIGGERS: usize = 20;
/// Connections one agent may have.
pub const MAX_CONNECTIONS: usize = 1_000;
/// Largest graph, as compact JSON: it is stored in one item, well inside DynamoDB's 400 KB.
pub const MAX_GRAPH_BYTES: usize = 350_000;
/// Longest `temp_ref_id`.
const MAX_TEMP_REF_CHARS: usize = 200;

/// A node of an agent: an instance of a node type with its parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentNode {
    pub agent_node_id: AgentNodeId,
    pub node_type_id: NodeTypeId,
    pub params_used: Map<String, Value>,
}

/// A directed connection: the source's output feeds the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)] // always stored as written: the two ends
#[schema(description = "An edge of an agent's graph.")]
pub struct Connection {
    #[schema(value_type = uuid::Uuid)]
    pub source_agent_node_id: AgentNodeId,
    #[schema(value_type = uuid::Uuid)]
    pub target_agent_node_id: AgentNodeId,
}

/// Nodes and connections; connections keep their creation order, which is the order in
/// which a node such as Concatenate takes its inputs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    pub nodes: Vec<AgentNode>,
    pub connections: Vec<Connection>,
}

/// One end of a connection in an operation: an existing node or one created earlier in
/// the same payload.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeRef {
    Id(AgentNodeId),
    Temp(String),
}

impl NodeRef {
    /// The end an operation names by `id` or `temp` (its parser lets exactly one through).
    fn of(id: Option<AgentNodeId>, temp: &Option<String>) -> NodeRef {
        match (id, temp) {
            (Some(id), _) => NodeRef::Id(id),
            (None, temp) => NodeRef::Temp(temp.clone().unwrap_or_default()),
        }
    }
}

/// One graph operation of an update, applied in order, all or nothing. Each variant is
/// closed: its parser refuses other properties (the OpenAPI document marks them so; the
/// derive closes only the enum).
#[derive(Clone, Debug, PartialEq, utoipa::ToSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Operation {
    CreateNode {
        #[schema(value_type = uuid::Uuid)]
        node_type_id: NodeTypeId,
        /// A name later operations of the same request use for this node.
        #[schema(min_length = 1, max_length = 200)]
        temp_ref_id: Option<String>,
        /// Null or omitted: `{}`.
        #[schema(value_type = Option<Map<String, Value>>)]
        params_used: Map<String, Value>,
    },
    /// Sets the given parameters; a `null` value removes that parameter.
    UpdateNode {
        #[schema(value_type = uuid::Uuid)]
        agent_node_id: AgentNodeId,
        params_used: Map<String, Value>,
    },
    DeleteNode {
        #[schema(value_type = uuid::Uuid)]
        agent_node_id: AgentNodeId,
    },
    /// Each end by `*_agent_node_id` or by `*_temp_ref_id`, exactly one of them.
    CreateConnection {
        #[schema(value_type = Option<uuid::Uuid>, nullable = false)]
        source_agent_node_id: Option<AgentNodeId>,
        #[schema(nullable = false, min_length = 1, max_length = 200)]
        source_temp_ref_id: Option<String>,
        #[schema(value_type = Option<uuid::Uuid>, nullable = false)]
        target_agent_node_id: Option<AgentNodeId>,
        #[schema(nullable = false, min_length = 1, max_length = 200)]
        target_temp_ref_id: Option<String>,
    },
    DeleteConnection {
        #[schema(value_type = Option<uuid::Uuid>, nullable = false)]
        source_agent_node_id: Option<AgentNodeId>,
        #[schema(nullable = false, min_length = 1, max_length = 200)]
        source_temp_ref_id: Option<String>,
        #[schema(value_type = Option<uuid::Uuid>, nullable = false)]
        target_agent_node_id: Option<AgentNodeId>,
        #[schema(nullable = false, min_length = 1, max_length = 200)]
        target_temp_ref_id: Option<String>,
    },
}

/// The properties each operation may have besides `op`, as its variant declares them.
const CREATE_NODE: &[&str] = &["node_type_id", "temp_ref_id", "params_used"];
const UPDATE_NODE: &[&str] = &["agent_node_id", "params_used"];
const DELETE_NODE: &[&str] = &["agent_node_id"];
const CONNECTION: &[&str] =
    &["source_agent_node_id", "source_temp_ref_id", "target_agent_node_id", "target_temp_ref_id"];

/// A node made by a payload, reported with the reference the caller gave it.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = "A node a `create_node` operation created.")]
pub struct CreatedNode {
    #[schema(required = true)]
    pub temp_ref_id: Option<String>,
    #[schema(value_type = uuid::Uuid)]
    pub agent_node_id: AgentNodeId,
}

/// Why an operation was refused; `index` is its position in `operations`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("operations[{index}]: {message}")]
pub struct OperationError {
    pub index: usize,
    pub message: String,
}

const OPERATION_KINDS: &str = "create_node, update_node, delete_node, create_connection, delete_connection";

/// Parses the `operations` array; every problem names the operation's index.
pub fn parse_operations(value: &Value) -> Result<Vec<Operation>, String> {
    let Value::Array(items) = value else {
        return Err("operations must be an array".into());
    };
    if items.is_empty() {
        return Err("operations must contain at least 1 item".into());
    }
    if items.len() > MAX_OPERATIONS {
        return Err(format!("operations may contain at most {MAX_OPERATIONS} items, got {}", items.len()));
    }
    items
        .iter()
        .enumerate()
        .map(|(index, item)| parse_operation(item).map_err(|message| OperationError { index, message }.to_string()))
        .collect()
}

fn parse_operation(item: &Value) -> Result<Operation, String> {
    let Value::Object(fields) = item else {
        return Err("each operation must be an object".into());
    };
    let op = match fields.get("op") {
        Some(Value::String(op)) => op.as_str(),
        Some(_) => return Err("op must be a string".into()),
        None => return Err(format!("op is required (one of {OPERATION_KINDS})")),
    };
    let allow = |allowed: &[&str]| {
        let allowed: Vec<&str> = std::iter::once("op").chain(allowed.iter().copied()).collect();
        crate::core::json::unknown_property_at(op, fields, &allowed).map_or(Ok(()), Err)
    };
    match op {
        "create_node" => {
            allow(CREATE_NODE)?;
            Ok(Operation::CreateNode {
                node_type_id: uuid_field(fields, "node_type_id")?,
                temp_ref_id: optional_temp_ref(fields.get("temp_ref_id"))?,
                params_used: params(fields.get("params_used"), false)?,
            })
        }
        "update_node" => {
            allow(UPDATE_NODE)?;
            Ok(Operation::UpdateNode {
                agent_node_id: uuid_field(fields, "agent_node_id")?,
                params_used: params(fields.get("params_used"), true)?,
            })
        }
        "delete_node" => {
            allow(DELETE_NODE)?;
            Ok(Operation::DeleteNode { agent_node_id: uuid_field(fields, "agent_node_id")? })
        }
        "create_connection" | "delete_connection" => {
            allow(CONNECTION)?;
            let (source_agent_node_id, source_temp_ref_id) = node_ref(fields, "source")?;
            let (target_agent_node_id, target_temp_ref_id) = node_ref(fields, "target")?;
            Ok(if op == "create_connection" {
                Operation::CreateConnection {
                    source_agent_node_id,
                    source_temp_ref_id,
                    target_agent_node_id,
                    target_temp_ref_id,
                }
            } else {
                Operation::DeleteConnection {
                    source_agent_node_id,
                    source_temp_ref_id,
                    target_agent_node_id,
                    target_temp_ref_id,
                }
            })
        }
        other => Err(format!("unknown op {other:?} (expected one of {OPERATION_KINDS})")),
    }
}

fn uuid_field<T: std::str::FromStr>(fields: &Map<String, Value>, name: &str) -> Result<T, String> {
    match fields.get(name) {
        Some(Value::String(text)) => text.parse().map_err(|_| format!("{name} must be a UUID")),
        Some(_) => Err(format!("{name} must be a UUID string")),
        None => Err(format!("{name} is required")),
    }
}

fn optional_temp_ref(value: Option<&Value>) -> Result<Option<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => temp_ref(text).map(Some),
        Some(_) => Err("temp_ref_id must be a string".into()),
    }
}

fn temp_ref(text: &str) -> Result<String, String> {
    if text.is_empty() || text.chars().count() > MAX_TEMP_REF_CHARS {
        return Err(format!("temp_ref_id must be 1 to {MAX_TEMP_REF_CHARS} characters"));
    }
    Ok(text.to_owned())
}

fn params(value: Option<&Value>, required: bool) -> Result<Map<String, Value>, String> {
    match value {
        None | Some(Value::Null) if !required => Ok(Map::new()),
        None | Some(Value::Null) => Err("params_used is required".into()),
        Some(Value::Object(map)) => Ok(map.clone()),
        Some(_) => Err("params_used must be an object".into()),
    }
}

/// Reads `{end}_agent_node_id` or `{end}_temp_ref_id`: exactly one of them.
fn node_ref(fields: &Map<String, Value>, end: &str) -> Result<(Option<AgentNodeId>, Option<String>), String> {
    let id_field = format!("{end}_agent_node_id");
    let temp_field = format!("{end}_temp_ref_id");
    match (fields.get(&id_field), fields.get(&temp_field)) {
        (Some(_), Some(_)) => Err(format!("give either {id_field} or {temp_field}, not both")),
        (Some(_), None) => Ok((Some(uuid_field(fields, &id_field)?), None)),
        (None, Some(Value::String(text))) => Ok((None, Some(temp_ref(text)?))),
        (None, Some(_)) => Err(format!("{temp_field} must be a string")),
        (None, None) => Err(format!("{id_field} or {temp_field} is required")),
    }
}

impl Graph {
    /// The node with this ID.
    pub fn node(&self, id: AgentNodeId) -> Option<&AgentNode> {
        self.nodes.iter().find(|node| node.agent_node_id == id)
    }

    /// Applies `operations` in order to a copy of the graph and returns the new graph and
    /// the nodes it created, or the first refusal; `self` is never changed.
    pub fn apply(&self, operations: &[Operation]) -> Result<(Graph, Vec<CreatedNode>), OperationError> {
        let mut graph = self.clone();
        let mut temp_refs: HashMap<String, AgentNodeId> = HashMap::new();
        let mut created = Vec::new();
        for (index, operation) in operations.iter().enumerate() {
            let fail = |message: String| OperationError { index, message };
            graph.apply_one(operation, &mut temp_refs, &mut created).map_err(fail)?;
        }
        let size = serde_json::to_vec(&graph).map_err(|error| OperationError {
            index: operations.len().saturating_sub(1),
            message: error.to_string(),
        })?;
        if size.len() > MAX_GRAPH_BYTES {
            return Err(OperationError {
                index: operations.len().saturating_sub(1),
                message: format!(
                    "the agent's graph would be {} bytes, over the limit of {MAX_GRAPH_BYTES}",
                    size.len()
                ),
            });
        }
        Ok((graph, created))
    }

    fn apply_one(
        &mut self,
        operation: &Operation,
        temp_refs: &mut HashMap<String, AgentNodeId>,
        created: &mut Vec<CreatedNode>,
    ) -> Result<(), String> {
        match operation {
            Operation::CreateNode { node_type_id, temp_ref_id, params_used } => {
                let node_type = nodes::find(*node_type_id)
                    .ok_or_else(|| format!("unknown node_type_id {node_type_id} (see GET /node_types)"))?;
                node_type.validate_params(params_used)?;
                if self.nodes.len() >= MAX_NODES {
                    return Err(format!("an agent may have at most {MAX_NODES} nodes"));
                }
                if node_type.kind == nodes::NodeKind::Trigger
                    && self
                        .nodes
                        .iter()
                        .filter(|node| node_type_of(node).is_ok_and(|t| t.kind == nodes::NodeKind::Trigger))
                        .count()
                        >= MAX_TRIGGERS
                {
                    return Err(format!("an agent may have at most {MAX_TRIGGERS} trigger nodes"));
                }
                let agent_node_id = AgentNodeId::new_v4();
                if let Some(reference) = temp_ref_id {
                    if temp_refs.insert(reference.clone(), agent_node_id).is_some() {
                        return Err(format!("temp_ref_id {reference:?} is used twice in this payload"));
                    }
                }
                self.nodes.push(AgentNode {
                    agent_node_id,
                    node_type_id: *node_type_id,
                    params_used: params_used.clone(),
                });
                created.push(CreatedNode { temp_ref_id: temp_ref_id.clone(), agent_node_id });
            }
            Operation::UpdateNode { agent_node_id, params_used } => {
                let node = self.node_mut(*agent_node_id)?;
                let mut merged = node.params_used.clone();
                for (name, value) in params_used {
                    match value {
                        Value::Null => merged.remove(name),
                        value => merged.insert(name.clone(), value.clone()),
                    };
                }
                node_type_of(node)?.validate_params(&merged)?;
                node.params_used = merged;
            }
            Operation::DeleteNode { agent_node_id } => {
                self.node_mut(*agent_node_id)?;
                self.nodes.retain(|node| node.agent_node_id != *agent_node_id);
                self.connections.retain(|connection| {
                    connection.source_agent_node_id != *agent_node_id
                        && connection.target_agent_node_id != *agent_node_id
                });
            }
            Operation::CreateConnection { .. } => {
                let connection = self.resolve(operation, temp_refs)?;
                self.check_new_connection(connection)?;
                self.connections.push(connection);
            }
            Operation::DeleteConnection { .. } => {
                let connection = self.resolve(operation, temp_refs)?;
                let before = self.connections.len();
                self.connections.retain(|existing| *existing != connection);
                if self.connections.len() == before {
                    return Err(format!(
                        "there is no connection from {} to {}",
                        connection.source_agent_node_id, connection.target_agent_node_id
                    ));
                }
            }
        }
        Ok(())
    }

    fn node_mut(&mut self, id: AgentNodeId) -> Result<&mut AgentNode, String> {
        self.nodes
            .iter_mut()
            .find(|node| node.agent_node_id == id)
            .ok_or_else(|| format!("agent_node_id {id} is not a node of this agent"))
    }

    /// The connection a connection operation names, its ends looked up.
    fn resolve(&self, operation: &Operation, temp_refs: &HashMap<String, AgentNodeId>) -> Result<Connection, String> {
        let (source, target) = match operation {
            Operation::CreateConnection {
                source_agent_node_id,
                source_temp_ref_id,
                target_agent_node_id,
                target_temp_ref_id,
            }
            | Operation::DeleteConnection {
                source_agent_node_id,
                source_temp_ref_id,
                target_agent_node_id,
                target_temp_ref_id,
            } => (
                NodeRef::of(*source_agent_node_id, source_temp_ref_id),
                NodeRef::of(*target_agent_node_id, target_temp_ref_id),
            ),
            _ => return Err("not a connection operation".into()),
        };
        let lookup = |reference: &NodeRef| -> Result<AgentNodeId, String> {
            let id = match reference {
                NodeRef::Id(id) => *id,
                NodeRef::Temp(name) => *temp_refs
                    .get(name)
                    .ok_or_else(|| format!("temp_ref_id {name:?} was not created earlier in this payload"))?,
            };
            self.node(id)
                .map(|node| node.agent_node_id)
                .ok_or_else(|| format!("agent_node_id {id} is not a node of this agent"))
        };
        Ok(Connection { source_agent_node_id: lookup(&source)?, target_agent_node_id: lookup(&target)? })
    }

    fn check_new_connection(&self, connection: Connection) -> Result<(), String> {
        let Connection { source_agent_node_id: source, target_agent_node_id: target } = connection;
        if self.connections.len() >= MAX_CONNECTIONS {
            return Err(format!("an agent may have at most {MAX_CONNECTIONS} connections"));
        }
        let source_type = self.node(source).map(node_type_of).transpose()?;
        let target_type = self.node(target).map(node_type_of).transpose()?;
        if let Some(node_type) = source_type.filter(|node_type| !node_type.has_outputs()) {
            return Err(format!("a {} node has no outgoing connections", node_type.name));
        }
        if let Some(node_type) = target_type.filter(|node_type| !node_type.accepts_inputs()) {
            return Err(format!("nothing may connect into a {} node", node_type.name));
        }
        if self.connections.contains(&connection) {
            return Err(format!("the connection from {source} to {target} already exists"));
        }
        if source == target || self.reaches(target, source) {
            return Err(format!("the connection from {source} to {target} would create a cycle"));
        }
        Ok(())
    }

    /// True when a path of connections leads from `from` to `to`: one pass over the
    /// connections to index them, then a walk that visits each node once.
    fn reaches(&self, from: AgentNodeId, to: AgentNodeId) -> bool {
        let mut outgoing: HashMap<AgentNodeId, Vec<AgentNodeId>> = HashMap::new();
        for connection in &self.connections {
            outgoing.entry(connection.source_agent_node_id).or_default().push(connection.target_agent_node_id);
        }
        let mut seen = HashSet::from([from]);
        let mut pending = vec![from];
        while let Some(node) = pending.pop() {
            for &next in outgoing.get(&node).into_iter().flatten() {
                if next == to {
                    return true;
                }
                if seen.insert(next) {
                    pending.push(next);
                }
            }
        }
        false
    }

    /// A copy with fresh node IDs (for duplicating an agent), connections remapped.
    pub fn with_new_ids(&self) -> Graph {
        let ids: HashMap<AgentNodeId, AgentNodeId> =
            self.nodes.iter().map(|node| (node.agent_node_id, AgentNodeId::new_v4())).collect();
        let remap = |id: AgentNodeId| ids.get(&id).copied().unwrap_or(id);
        Graph {
            nodes: self
                .nodes
                .iter()
                .map(|node| AgentNode { agent_node_id: remap(node.agent_node_id), ..node.clone() })
                .collect(),
            connections: self
                .connections
                .iter()
                .map(|connection| Connection {
                    source_agent_node_id: remap(connection.source_agent_node_id),
                    target_agent_node_id: remap(connection.target_agent_node_id),
                })
                .collect(),
        }
    }
}

/// The catalog entry of a stored node; a type missing from the catalog is a data error.
fn node_type_of(node: &AgentNode) -> Result<&'static NodeType, String> {
    nodes::find(node.node_type_id).ok_or_else(|| {
        format!("node {} has node type {}, which is not in the catalog", node.agent_node_id, node.node_type_id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lists the parser allows are the properties each variant declares (and documents).
    #[test]
    fn each_operation_allows_the_properties_its_variant_declares() {
        let schema = serde_json::to_value(<Operation as utoipa::PartialSchema>::schema()).unwrap();
        let variants = schema["oneOf"].as_array().unwrap();
        let declared: Vec<(String, Vec<String>)> = variants
            .iter()
            .map(|variant| {
                let properties = variant["properties"].as_object().unwrap();
                let op = properties["op"]["enum"][0].as_str().unwrap().to_owned();
                (op, properties.keys().filter(|key| *key != "op").cloned().collect())
            })
            .collect();
        let allowed = [
            ("create_node", CREATE_NODE),
            ("update_node", UPDATE_NODE),
            ("delete_node", DELETE_NODE),
            ("create_connection", CONNECTION),
            ("delete_connection", CONNECTION),
        ];
        let allowed: Vec<(String, Vec<String>)> = allowed
            .iter()
            .map(|(op, fields)| (op.to_string(), fields.iter().map(|field| field.to_string()).collect()))
            .collect();
        assert_eq!(declared, allowed);
    }
}
