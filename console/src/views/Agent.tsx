import { useMemo, useState } from "react";
import { get } from "../api";
import { Graph } from "../Graph";
import { nodeNames } from "../names";
import { Link, Problem, useLoad } from "../common";
import type { AgentDetail, RunSummary } from "../types";
import { StartRun } from "./StartRun";

export function Agent({ id }: { id: string }) {
  const { value, error } = useLoad(() => get<AgentDetail>(`/agent/${id}`), [id]);
  const runs = useLoad(() => get<{ runs: RunSummary[] }>(`/agent/${id}/runs?limit=10`), [id]);
  const [selected, setSelected] = useState<string | null>(null);
  const [starting, setStarting] = useState(false);
  const names = useMemo(() => nodeNames(value?.agent_nodes ?? []), [value]);
  if (error) return <Problem message={error} />;
  if (!value) return <p>Loading…</p>;
  const node = value.agent_nodes.find((candidate) => candidate.agent_node_id === selected);
  return (
    <section>
      <h1>{value.agent.name}</h1>
      {value.agent.description && <p>{value.agent.description}</p>}
      <button type="button" onClick={() => setStarting((open) => !open)} aria-expanded={starting}>
        Start run
      </button>
      {starting && <StartRun agent={value} />}
      <div className="split">
        <Graph nodes={value.agent_nodes} connections={value.connections} names={names} selected={selected} onSelect={setSelected} />
        <aside aria-label="Node parameters">
          {node ? (
            <>
              <h2>{names.get(node.agent_node_id)}</h2>
              <p>
                {node.node_type.node_type_name} · <code>{node.agent_node_id}</code>
              </p>
              <pre>{JSON.stringify(node.params_used, null, 2)}</pre>
            </>
          ) : (
            <p>Select a node to see its parameters.</p>
          )}
        </aside>
      </div>
      <h2>Recent runs</h2>
      <Problem message={runs.error} />
      {runs.value && runs.value.runs.length === 0 && <p>No runs yet.</p>}
      <ul>
        {runs.value?.runs.map((run) => (
          <li key={run.run_id}>
            <Link to={`/runs/${run.run_id}`}>{run.run_id}</Link> {run.status}
          </li>
        ))}
      </ul>
    </section>
  );
}
