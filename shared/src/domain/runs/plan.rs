//! From a template to a runtime graph and its tasks: ignored nodes removed with their
//! incoming edges rewired downstream, parameters merged and validated, and the task of
//! every item planned up front, with chains of single-input edits joined into one task
//! (one decode and one encode for the whole chain).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{BoundInput, NodeIndex, RuntimeNode, Task, TaskIndex, TaskSource, TaskStatus, MAX_TASKS};
use crate::domain::graph::{AgentNodeId, Graph};
use crate::domain::nodes::{self, ItemFlow, NodeKind};

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
    // Upstream of a kept node: its template upstream with every ignored node replaced by
    // that node's own upstream, recursively (the graph is acyclic).
    fn expand(template: &Graph, ignore: &[AgentNodeId], node: AgentNodeId, into: &mut Vec<AgentNodeId>) {
        for connection in template.connections.iter().filter(|c| c.target_agent_node_id == node) {
            let source = connection.source_agent_node_id;
            if ignore.contains(&source) {
                expand(template, ignore, source, into);
            } else if !into.contains(&source) {
                into.push(source);
            }
        }
    }
    let new_ids: HashMap<AgentNodeId, AgentNodeId> = template
        .nodes
        .iter()
        .filter(|node| !ignore.contains(&node.agent_node_id))
        .map(|node| (node.agent_node_id, AgentNodeId::new_v4()))
        .collect();
    let mut nodes = Vec::new();
    for node in template.nodes.iter().filter(|node| !ignore.contains(&node.agent_node_id)) {
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
        let mut upstream = Vec::new();
        expand(template, ignore, node.agent_node_id, &mut upstream);
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

/// Orders nodes so that each follows its upstream nodes, otherwise keeping their order.
fn topological(mut pending: Vec<RuntimeNode>) -> Vec<RuntimeNode> {
    let mut ordered: Vec<RuntimeNode> = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        let ready = pending
            .iter()
            .position(|node| node.upstream.iter().all(|up| ordered.iter().any(|done| done.agent_node_id == *up)))
            // Template graphs are acyclic; should one not be, keep going in stored order.
            .unwrap_or(0);
        ordered.push(pending.remove(ready));
    }
    ordered
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
    nodes: &[RuntimeNode],
    inputs: &[BoundInput],
    is_output: impl Fn(NodeIndex) -> bool,
) -> Result<Vec<Task>, String> {
    let mut tasks: Vec<Task> = Vec::new();
    // The tasks whose results leave each node, in item order.
    let mut items_out: Vec<Vec<TaskIndex>> = vec![Vec::new(); nodes.len()];
    let position = |id: AgentNodeId| nodes.iter().position(|node| node.agent_node_id == id);
    let new_task = |node: NodeIndex, source: TaskSource| Task {
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
    };
    for (index, node) in nodes.iter().enumerate() {
        let upstream_items: Vec<TaskIndex> =
            node.upstream.iter().filter_map(|id| position(*id)).flat_map(|up| items_out[up].clone()).collect();
        let flow = node.node_type().map(|node_type| node_type.flow);
        match node.kind() {
            Some(NodeKind::Trigger) => {}
            Some(NodeKind::Input) => {
                for (input, _) in inputs.iter().enumerate().filter(|(_, bound)| bound.node == node.agent_node_id) {
                    items_out[index].push(TaskIndex(tasks.len()));
                    tasks.push(new_task(NodeIndex(index), TaskSource::Input { input }));
                }
            }
            Some(NodeKind::Generation) => {
                return Err(format!(
                    "node {} is a {} tile, and generation tiles are not available in this deployment yet",
                    node.original_node_id,
                    node.type_name()
                ))
            }
            _ if flow == Some(ItemFlow::AllItems) => {
                if !upstream_items.is_empty() {
                    items_out[index].push(TaskIndex(tasks.len()));
                    tasks.push(new_task(NodeIndex(index), TaskSource::Tasks { tasks: upstream_items }));
                }
            }
            _ => {
                for item in upstream_items {
                    items_out[index].push(TaskIndex(tasks.len()));
                    tasks.push(new_task(NodeIndex(index), TaskSource::Tasks { tasks: vec![item] }));
                }
            }
        }
        if tasks.len() > MAX_TASKS {
            return Err(format!(
                "this run would need more than {MAX_TASKS} tasks (inputs × nodes); use fewer inputs or a smaller graph"
            ));
        }
    }
    Ok(join_chains(tasks, nodes, is_output))
}

/// Joins each single-input task to the task before it when that one is a chain of
/// edits, feeds nothing else and delivers no output.
fn join_chains(mut tasks: Vec<Task>, nodes: &[RuntimeNode], is_output: impl Fn(NodeIndex) -> bool) -> Vec<Task> {
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
        if joins_chain(&nodes[node])
            && consumers[source.0] == 1
            && matches!(tasks[chain].source, TaskSource::Tasks { .. })
            && joins_chain(&nodes[chain_first])
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
