// The shapes the console reads, as the service's OpenAPI document gives them
// (`docs/openapi.json`); only the fields the console shows.

export type RunStatus = "running" | "completed" | "partial_complete" | "failed" | "cancelled";

export interface Agent {
  id: string;
  name: string;
  description: string;
  updated_at: string;
}

export interface AgentNode {
  agent_node_id: string;
  node_type: { node_type_id: string; node_type_name: string };
  params_used: Record<string, unknown>;
}

export interface Connection {
  source_agent_node_id: string;
  target_agent_node_id: string;
}

export interface AgentDetail {
  agent: Agent;
  agent_nodes: AgentNode[];
  connections: Connection[];
}

export interface Progress {
  done: number;
  total: number;
}

export interface RunOutput {
  id: string;
  video_url: string;
  thumbnail_url: string | null;
  completed_at: string;
  original_node_id: string | null;
  timeline_prproj_url: string | null;
  sources: Record<string, unknown>[];
}

export interface RunRecord {
  run_id: string;
  agent_id: string;
  started_at: string;
  updated_at: string;
  finished_at: string | null;
  status: RunStatus;
  status_message: string | null;
  node_status_counts: { completed: number; in_progress: number; failed: number };
  outputs: RunOutput[];
  needs_credits: boolean;
  errors: { original_node_id: string | null; messages: string[] }[];
  progress?: Progress;
}

export interface RunNode {
  agent_node_id: string;
  original_node_id: string | null;
  node_type: { node_type_id: string; node_type_name: string };
  status: string;
  status_message: string | null;
  errors: string[];
  outputs: RunOutput[];
  needs_credits: boolean;
  progress?: Progress;
  started_at?: string | null;
  finished_at?: string | null;
}

export interface RunNodes {
  run_id: string;
  status: RunStatus;
  nodes: RunNode[];
}

export interface RunSummary {
  run_id: string;
  agent_id: string;
  status: RunStatus;
  started_at: string;
  updated_at: string;
  node_status_counts: { completed: number; in_progress: number; failed: number };
}

export interface Delivery {
  delivery_id: string;
  event: string;
  sequence: number;
  url: string;
  state: string;
  created_at: string;
  attempts: { at: string; status_code: number | null; error: string | null; duration_ms: number }[];
}

export interface LedgerEntry {
  entry_id: string;
  created_at: string;
  amount: number;
  balance_after: number;
  reason: string;
  run_id: string | null;
}

export interface SocialPost {
  post_id: string;
  status: string;
  description: string;
  platforms: string[];
  scheduled_at: string;
  created_at: string;
  error: string | null;
}

export interface AvatarProfile {
  id: string;
  name: string;
  status: string;
  status_message: string | null;
  video_preview_url: string | null;
}

export interface Store {
  id: string;
  name: string;
  source_type: string;
}

export interface Entry {
  entry_id: string;
  display_name: string;
  metadata: Record<string, unknown>;
  created_at: string;
}

/** What a run page shows: the run's record and its nodes. */
export interface Snapshot {
  run: RunRecord;
  nodes: RunNodes;
}
