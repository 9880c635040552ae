//! From a template to a runtime graph and its tasks: ignored nodes removed with their
//! incoming edges rewired downstream, parameters merged and validated, and the task of
//! every item planned up front, with chains of single-input edits joined into one task
//! (one decode and one encode for the whole chain).

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::{BoundInput, NodeIndex, RuntimeNode, Task, TaskIndex, TaskSource, TaskStatus, MAX_TASKS};
use crate::core::shared_list::SharedList;
use crate::domain::graph::Graph;
use crate::domain::ids::AgentNodeId;
use crate::domain::media::MediaType;
use crate::domain::nodes::{self, Connectable, ItemFlow, NodeKind, NodeType};

/// The runtime graph of a template for one run: nodes in an order where every node comes
/// after its upstream nodes, with new IDs.
pub fn runtime_graph(
    template: &Graph,
    ignore: &[AgentNodeId],
    overrides: &[(AgentNodeId, Map<String, Value>)],
) -> Result<Vec<RuntimeNode>, String> {
    for node in ignore {
        if template.node(*node).is_none() {
            return Err(format!("ignore_nodes: {node} is not a node of this agent"));
        }
    }
    for (node, params) in overrides {
        let Some(template_node) = template.node(*node) else {
            return Err(format!("update_params: {node} is not a node of this agent"));
        };
        let node_type = nodes::find(template_node.node_type_id)
            .ok_or_else(|| format!("update_params: node {node} has an unknown node type"))?;
        if node_type.protected {
            return Err(format!(
                "update_params: node {node} is a {} node, whose parameters cannot be changed by a run",
                node_type.name
            ));
        }
        if ignore.contains(node) {
            return Err(format!("update_params: node {node} is also in ignore_nodes"));
        }
        let _ = params;
    }
    let ignored: HashSet<AgentNodeId> = ignore.iter().copied().collect();
    let upstream_of = kept_upstream(template, &ignored);
    let new_ids: HashMap<AgentNodeId, AgentNodeId> = template
        .nodes
        .iter()
        .filter(|node| !ignored.contains(&node.agent_node_id))
        .map(|node| (node.agent_node_id, AgentNodeId::new_v4()))
        .collect();
    let mut nodes = Vec::new();
    for node in template.nodes.iter().filter(|node| !ignored.contains(&node.agent_node_id)) {
        let node_type = nodes::find(node.node_type_id)
            .ok_or_else(|| format!("node {} has an unknown node type {}", node.agent_node_id, node.node_type_id))?;
        let mut params = node.params_used.clone();
        if let Some((_, changes)) = overrides.iter().find(|(id, _)| *id == node.agent_node_id) {
            for (name, value) in changes {
                match value {
                    Value::Null => params.remove(name),
                    value => params.insert(name.clone(), value.clone()),
                };
            }
        }
        node_type
            .validate_params(&params)
            .map_err(|problem| format!("node {} ({}): {problem}", node.agent_node_id, node_type.name))?;
        let upstream = upstream_of.get(&node.agent_node_id).map_or(&[][..], Vec::as_slice);
        nodes.push(RuntimeNode::new(
            new_ids[&node.agent_node_id],
            node.agent_node_id,
            node.node_type_id,
            params,
            upstream.iter().map(|id| new_ids[id]).collect(),
        ));
    }
    Ok(topological(nodes))
}

/// The upstream of every node of the template, with each ignored node replaced by that
/// node's own upstream (recursively; the graph is acyclic), in connection order without
/// repeats. Each node's list is made once from its sources' lists, in an order where
/// sources come first: linear in nodes and connections however the ignored nodes are
/// wired (a walk per path would be exponential in a graph of fully connected layers).
fn kept_upstream(template: &Graph, ignored: &HashSet<AgentNodeId>) -> HashMap<AgentNodeId, Vec<AgentNodeId>> {
    let mut incoming: HashMap<AgentNodeId, Vec<AgentNodeId>> = HashMap::new();
    for connection in &template.connections {
        incoming.entry(connection.target_agent_node_id).or_default().push(connection.source_agent_node_id);
    }
    let order = topological_ids(template.nodes.iter().map(|node| node.agent_node_id), &incoming);
    let mut upstream: HashMap<AgentNodeId, Vec<AgentNodeId>> = HashMap::new();
    for node in order {
        let mut list: Vec<AgentNodeId> = Vec::new();
        let mut seen: HashSet<AgentNodeId> = HashSet::new();
        for source in incoming.get(&node).into_iter().flatten() {
            let through: &[AgentNodeId] = if ignored.contains(source) {
                upstream.get(source).map_or(&[], Vec::as_slice)
            } else {
                std::slice::from_ref(source)
            };
            list.extend(through.iter().filter(|id| seen.insert(**id)));
        }
        upstream.insert(node, list);
    }
    upstream
}

/// `ids` in an order where each comes after its sources in `incoming` (Kahn's
/// algorithm; among ready nodes the given order is kept). Nodes on a cycle, which a
/// template cannot have, come last in their given order.
fn topological_ids(
    ids: impl Iterator<Item = AgentNodeId>,
    incoming: &HashMap<AgentNodeId, Vec<AgentNodeId>>,
) -> Vec<AgentNodeId> {
    let ids: Vec<AgentNodeId> = ids.collect();
    let position: HashMap<AgentNodeId, usize> = ids.iter().enumerate().map(|(at, id)| (*id, at)).collect();
    let mut waiting_on = vec![0usize; ids.len()];
    let mut outgoing: Vec<Vec<usize>> = vec![Vec::new(); ids.len()];
    for (at, id) in ids.iter().enumerate() {
        for source in incoming.get(id).into_iter().flatten() {
            if let Some(&from) = position.get(source) {
                waiting_on[at] += 1;
                outgoing[from].push(at);
            }
        }
    }
    let mut ready: std::collections::BTreeSet<usize> = (0..ids.len()).filter(|at| waiting_on[*at] == 0).collect();
    let mut placed = vec![false; ids.len()];
    let mut order = Vec::with_capacity(ids.len());
    while let Some(at) = ready.pop_first() {
        placed[at] = true;
        order.push(ids[at]);
        for &next in &outgoing[at] {
            waiting_on[next] -= 1;
            if waiting_on[next] == 0 {
                ready.insert(next);
            }
        }
    }
    order.extend(ids.iter().enumerate().filter(|(at, _)| !placed[*at]).map(|(_, id)| *id));
    order
}

/// Orders nodes so that each follows its upstream nodes, otherwise keeping their order.
fn topological(nodes: Vec<RuntimeNode>) -> Vec<RuntimeNode> {
    let incoming: HashMap<AgentNodeId, Vec<AgentNodeId>> =
        nodes.iter().map(|node| (node.agent_node_id, node.upstream.clone())).collect();
    let order = topological_ids(nodes.iter().map(|node| node.agent_node_id), &incoming);
    let mut by_id: HashMap<AgentNodeId, RuntimeNode> =
        nodes.into_iter().map(|node| (node.agent_node_id, node)).collect();
    order.into_iter().filter_map(|id| by_id.remove(&id)).collect()
}

/// Whether a node may be joined to the task before it: a single-input edit or a
/// Destination (which delivers what it receives).
fn joins_chain(node: &RuntimeNode) -> bool {
    node.node_type().is_some_and(|node_type| match node_type.kind {
        NodeKind::Edit => node_type.flow == ItemFlow::EachItem,
        NodeKind::Destination => true,
        _ => false,
    })
}

/// Plans every task of the run. `is_output(node)` tells which nodes deliver outputs
/// (no chain continues past one).
pub fn plan_tasks(
    nodes: &SharedList<RuntimeNode>,
    inputs: &[BoundInput],
    is_output: impl Fn(NodeIndex) -> bool,
) -> Result<Vec<Task>, String> {
    let mut plan = Plan { tasks: Vec::new(), media: Vec::new(), items_out: vec![Vec::new(); nodes.len()] };
    let positions: HashMap<AgentNodeId, usize> =
        nodes.iter().enumerate().map(|(at, node)| (node.agent_node_id, at)).collect();
    let position = |id: AgentNodeId| positions.get(&id).copied();
    for (index, node) in nodes.iter().enumerate() {
        let upstream_items: Vec<TaskIndex> =
            node.upstream.iter().filter_map(|id| position(*id)).flat_map(|up| plan.items_out[up].clone()).collect();
        let node_type = node.node_type();
        let named = || format!("node {} ({})", node.original_node_id, node.type_name());
        let at = NodeIndex(index);
        match node.kind() {
            Some(NodeKind::Trigger) => {}
            Some(NodeKind::Input) => {
                for (input, _) in inputs.iter().enumerate().filter(|(_, bound)| bound.node == node.agent_node_id) {
                    plan.push(at, TaskSource::Input { input }, MediaType::Video);
                }
            }
            Some(NodeKind::Generation) => {
                if !upstream_items.is_empty() {
                    return Err(format!(
                        "{} makes its media from its parameters and takes no input: remove the connections into it",
                        named()
                    ));
                }
                plan.push(
                    at,
                    TaskSource::Generate,
                    node_type.and_then(|node_type| node_type.produces).unwrap_or_default(),
                );
            }
            Some(NodeKind::Destination) => {
                for item in upstream_items {
                    let media = plan.media[item.0];
                    plan.push(at, TaskSource::Tasks { tasks: vec![item] }, media);
                }
            }
            _ => plan.edit(at, node_type, &upstream_items, &named)?,
        }
        if plan.tasks.len() > MAX_TASKS {
            return Err(too_many_tasks());
        }
    }
    Ok(join_chains(plan.tasks, nodes, is_output))
}

/// The tasks planned so far.
struct Plan {
    tasks: Vec<Task>,
    /// What each task's result holds.
    media: Vec<MediaType>,
    /// The tasks whose results leave each node, in item order.
    items_out: Vec<Vec<TaskIndex>>,
}

impl Plan {
    /// A task of node `node` from `source`, whose result holds `media`.
    fn push(&mut self, node: NodeIndex, source: TaskSource, media: MediaType) {
        self.items_out[node.0].push(TaskIndex(self.tasks.len()));
        self.tasks.push(Task::waiting(node, source));
        self.media.push(media);
    }

    /// The tasks of edit node `node` over the items reaching it: one of them all (a
    /// node of every item), or one per video with its connected medium.
    fn edit(
        &mut self,
        node: NodeIndex,
        node_type: Option<&NodeType>,
        upstream_items: &[TaskIndex],
        named: &dyn Fn() -> String,
    ) -> Result<(), String> {
        let connectable = node_type.and_then(|node_type| node_type.connectable);
        let (videos, connected) = split_items(upstream_items, &self.media, connectable, named)?;
        if let (true, Some(item)) = (videos.is_empty(), connected) {
            return Err(format!(
                "{} has a connected {} but no video reaches it to edit",
                named(),
                self.media[item.0].as_str()
            ));
        }
        if node_type.map(|node_type| node_type.flow) == Some(ItemFlow::AllItems) {
            if !videos.is_empty() {
                self.push(node, TaskSource::Tasks { tasks: videos }, MediaType::Video);
            }
            return Ok(());
        }
        if self.tasks.len() + videos.len() > MAX_TASKS {
            return Err(too_many_tasks());
        }
        for item in videos {
            let sources = std::iter::once(item).chain(connected).collect();
            self.push(node, TaskSource::Tasks { tasks: sources }, MediaType::Video);
        }
        Ok(())
    }
}

impl Task {
    /// A task not started yet.
    fn waiting(node: NodeIndex, source: TaskSource) -> Self {
        Task {
            nodes: vec![node],
            source,
            attempt: 0,
            claims: 0,
            status: TaskStatus::Waiting,
            lease_until: None,
            error: None,
            error_node: None,
            result: None,
            detached_attempts: 0,
            sent: false,
            queued_at: None,
            charged: None,
            credits: None,
            refund_owed: None,
            parts: Vec::new(),
            progress_event_at: None,
            started_at: None,
            finished_at: None,
        }
    }
}

/// The items reaching an edit node, split into the videos it edits and the generated
/// medium it takes through a connection (at most one, of the kind it takes); anything
/// else reaching it is refused, naming the node.
fn split_items(
    items: &[TaskIndex],
    media: &[MediaType],
    connectable: Option<Connectable>,
    named: &dyn Fn() -> String,
) -> Result<(Vec<TaskIndex>, Option<TaskIndex>), String> {
    let mut videos = Vec::with_capacity(items.len());
    let mut connected = None;
    for &item in items {
        match (media[item.0], connectable) {
            (MediaType::Video, _) => videos.push(item),
            (other, Some(takes)) if takes.media == other => {
                if connected.replace(item).is_some() {
                    return Err(format!("{} takes one connected {}; several are connected", named(), other.as_str()));
                }
            }
            (other, Some(takes)) => {
                return Err(format!(
                    "{} edits video and takes a connected {}, not an {}",
                    named(),
                    takes.media.as_str(),
                    other.as_str()
                ))
            }
            (other, None) => return Err(format!("{} edits video, not an {}", named(), other.as_str())),
        }
    }
    Ok((videos, connected))
}

fn too_many_tasks() -> String {
    format!("this run would need more than {MAX_TASKS} tasks (inputs × nodes); use fewer inputs or a smaller graph")
}

/// Joins each single-input task to the task before it when that one is a chain of
/// edits, feeds nothing else and delivers no output.
fn join_chains(
    mut tasks: Vec<Task>,
    nodes: &SharedList<RuntimeNode>,
    is_output: impl Fn(NodeIndex) -> bool,
) -> Vec<Task> {
    let mut consumers = vec![0usize; tasks.len()];
    for task in &tasks {
        if let TaskSource::Tasks { tasks: sources } = &task.source {
            for source in sources {
                consumers[source.0] += 1;
            }
        }
    }
    // Each task's representative: itself, or the chain it was joined to.
    let mut alias: Vec<TaskIndex> = (0..tasks.len()).map(TaskIndex).collect();
    let mut joined = vec![false; tasks.len()];
    for index in 0..tasks.len() {
        let TaskSource::Tasks { tasks: sources } = &tasks[index].source else { continue };
        let [source] = sources.as_slice() else { continue };
        let node = tasks[index].nodes[0];
        let chain = alias[source.0];
        let chain_last = *tasks[chain].nodes.last().unwrap_or(&node);
        let chain_first = tasks[chain].nodes[0];
        // A generation's file goes to its one Destination in the same task (the task
        // that makes it delivers it); edits of it are tasks of their own.
        let delivers_generated = tasks[chain].source == TaskSource::Generate
            && tasks[chain].nodes.len() == 1
            && nodes[node].kind() == Some(NodeKind::Destination);
        let edit_chain = matches!(tasks[chain].source, TaskSource::Tasks { .. }) && joins_chain(&nodes[chain_first]);
        if joins_chain(&nodes[node])
            && consumers[source.0] == 1
            && (edit_chain || delivers_generated)
            && !is_output(chain_last)
        {
            tasks[chain].nodes.push(node);
            alias[index] = chain;
            joined[index] = true;
        }
    }
    let mut renumbered = vec![TaskIndex(usize::MAX); tasks.len()];
    let mut next = 0;
    for index in 0..tasks.len() {
        if !joined[index] {
            renumbered[index] = TaskIndex(next);
            next += 1;
        }
    }
    tasks
        .into_iter()
        .enumerate()
        .filter(|(index, _)| !joined[*index])
        .map(|(_, mut task)| {
            if let TaskSource::Tasks { tasks: sources } = &mut task.source {
                for source in sources.iter_mut() {
                    *source = renumbered[alias[source.0].0];
                }
            }
            task
        })
        .collect()
}
