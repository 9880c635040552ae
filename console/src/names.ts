// A node's name in the console: its type's name, numbered when the agent has several
// nodes of that type (in the agent's node order), so that each name is unique.
import type { AgentNode } from "./types";

export function nodeNames(nodes: AgentNode[]): Map<string, string> {
  const counts = new Map<string, number>();
  for (const node of nodes) {
    const type = node.node_type.node_type_name;
    counts.set(type, (counts.get(type) ?? 0) + 1);
  }
  const seen = new Map<string, number>();
  const names = new Map<string, string>();
  for (const node of nodes) {
    const type = node.node_type.node_type_name;
    const at = (seen.get(type) ?? 0) + 1;
    seen.set(type, at);
    names.set(node.agent_node_id, (counts.get(type) ?? 0) > 1 ? `${type} ${at}` : type);
  }
  return names;
}
