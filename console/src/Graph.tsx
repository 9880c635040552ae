// An agent's graph drawn with React Flow: each node its name and type (and, on a run,
// its status word and progress), edges as the agent's connections, laid out by dagre.
import { useMemo } from "react";
import { ReactFlow, Background, Controls, Handle, Position, type Edge, type Node, type NodeProps } from "@xyflow/react";
import "@xyflow/react/dist/style.css";
import { layout, NODE_HEIGHT, NODE_WIDTH } from "./layout";
import { statusColour } from "./status";
import type { AgentNode, Connection, Progress } from "./types";

export interface NodeState {
  status: string;
  progress?: Progress;
}

type Box = Node<{ id: string; name: string; type: string; state?: NodeState; selected: boolean }, "box">;

function BoxNode({ data }: NodeProps<Box>) {
  const colour = data.state ? statusColour(data.state.status) : "#d0d7de";
  return (
    <div
      className="graph-node"
      style={{ width: NODE_WIDTH, height: NODE_HEIGHT, borderColor: colour, outline: data.selected ? "2px solid #0969da" : "none" }}
    >
      <Handle type="target" position={Position.Left} />
      <strong>{data.name}</strong>
      <small>
        {data.type} · {data.id.slice(0, 8)}
      </small>
      {data.state && (
        <span className="status" style={{ color: colour }}>
          {data.state.status}
          {data.state.progress && ` ${data.state.progress.done}/${data.state.progress.total}`}
        </span>
      )}
      <Handle type="source" position={Position.Right} />
    </div>
  );
}

const nodeTypes = { box: BoxNode };

export function Graph(props: {
  nodes: AgentNode[];
  connections: Connection[];
  names: Map<string, string>;
  states?: Map<string, NodeState>;
  selected?: string | null;
  onSelect?: (id: string) => void;
}) {
  const { nodes, connections, names, states, selected, onSelect } = props;
  const placed = useMemo(
    () =>
      layout(
        nodes.map((node) => node.agent_node_id),
        connections.map((edge) => [edge.source_agent_node_id, edge.target_agent_node_id]),
      ),
    [nodes, connections],
  );
  const flowNodes: Box[] = nodes.map((node) => {
    const at = placed.get(node.agent_node_id) ?? { x: 0, y: 0 };
    return {
      id: node.agent_node_id,
      type: "box",
      position: { x: at.x, y: at.y },
      // Known sizes (every box is this size): React Flow shows a node only once it has
      // dimensions, and a node given without them is hidden again at each render with
      // new node objects until it is measured again. A CI run of the browser test found
      // the agent page's three nodes still hidden after 30 s.
      width: NODE_WIDTH,
      height: NODE_HEIGHT,
      data: {
        id: node.agent_node_id,
        name: names.get(node.agent_node_id) ?? node.node_type.node_type_name,
        type: node.node_type.node_type_name,
        state: states?.get(node.agent_node_id),
        selected: node.agent_node_id === selected,
      },
    };
  });
  const edges: Edge[] = connections.map((edge) => ({
    id: `${edge.source_agent_node_id}-${edge.target_agent_node_id}`,
    source: edge.source_agent_node_id,
    target: edge.target_agent_node_id,
  }));
  return (
    <div className="graph" role="group" aria-label="Graph">
      <ReactFlow
        nodes={flowNodes}
        edges={edges}
        nodeTypes={nodeTypes}
        fitView
        nodesDraggable={false}
        nodesConnectable={false}
        onNodeClick={(_, node) => onSelect?.(node.id)}
        onlyRenderVisibleElements
        proOptions={{ hideAttribution: true }}
      >
        <Background />
        <Controls showInteractive={false} />
      </ReactFlow>
    </div>
  );
}
