// A run's tasks as bars on one time axis: where the run's time went.
import type { RunNode } from "./types";

export interface Bar {
  label: string;
  status: string;
  /** Share of the axis (0..1) where the bar starts and its width. */
  left: number;
  width: number;
  seconds: number;
}

export function bars(nodes: RunNode[], names: Map<string, string>, now: number): Bar[] {
  const timed = nodes.filter((node) => node.started_at);
  if (timed.length === 0) return [];
  const start = (node: RunNode) => Date.parse(node.started_at as string);
  const end = (node: RunNode) => (node.finished_at ? Date.parse(node.finished_at) : now);
  const from = Math.min(...timed.map(start));
  const to = Math.max(...timed.map(end), from + 1);
  const span = to - from;
  return timed
    .slice()
    .sort((a, b) => start(a) - start(b))
    .map((node) => ({
      label: names.get(node.original_node_id ?? "") ?? node.node_type.node_type_name,
      status: node.status,
      left: (start(node) - from) / span,
      width: Math.max((end(node) - start(node)) / span, 0.002),
      seconds: (end(node) - start(node)) / 1000,
    }));
}
