// Places an agent's nodes left to right by their connections (dagre's layered layout),
// so that a graph of any size reads as a flow rather than as hand-placed boxes.
import dagre from "@dagrejs/dagre";

export const NODE_WIDTH = 190;
export const NODE_HEIGHT = 64;

export interface Placed {
  id: string;
  x: number;
  y: number;
}

export function layout(ids: string[], edges: [string, string][]): Map<string, Placed> {
  const graph = new dagre.graphlib.Graph();
  graph.setGraph({ rankdir: "LR", nodesep: 24, ranksep: 60, marginx: 10, marginy: 10 });
  graph.setDefaultEdgeLabel(() => ({}));
  for (const id of ids) graph.setNode(id, { width: NODE_WIDTH, height: NODE_HEIGHT });
  const known = new Set(ids);
  for (const [from, to] of edges) if (known.has(from) && known.has(to)) graph.setEdge(from, to);
  dagre.layout(graph);
  const placed = new Map<string, Placed>();
  for (const id of ids) {
    const node = graph.node(id);
    // dagre gives centres; React Flow places by the top-left corner.
    placed.set(id, { id, x: node.x - NODE_WIDTH / 2, y: node.y - NODE_HEIGHT / 2 });
  }
  return placed;
}
