import { useEffect, useMemo, useState } from "react";
import { get, post, query } from "../api";
import { errorText, Link, Pager, Problem, useAction, useLoad, usePages, when } from "../common";
import { Graph, type NodeState } from "../Graph";
import { nodeNames } from "../names";
import { poll, refresher } from "../poll";
import { canCancel, canResume, isLive, statusColour } from "../status";
import { bars } from "../timeline";
import type { AgentDetail, Delivery, RunNodes, RunRecord, Snapshot } from "../types";

/** A run, live: one call a second at most (see `refresher`). */
export function Run({ id }: { id: string }) {
  const [snapshot, setSnapshot] = useState<Snapshot | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [round, setRound] = useState(0);
  useEffect(() => {
    const poller = poll(
      refresher(
        () => get<RunRecord>(`/agent_run/${id}`),
        () => get<RunNodes>(`/agent_run/${id}/nodes`),
      ),
      (value) => isLive(value.run.status) || !value.current,
      (value) => {
        if (value instanceof Error) setError(errorText(value));
        else {
          setError(null);
          setSnapshot(value);
        }
      },
    );
    return () => poller.stop();
  }, [id, round]);
  const agentId = snapshot?.run.agent_id;
  const agent = useLoad(() => (agentId ? get<AgentDetail>(`/agent/${agentId}`) : Promise.resolve(null)), [agentId]);
  const names = useMemo(() => nodeNames(agent.value?.agent_nodes ?? []), [agent.value]);
  if (!snapshot) return error ? <Problem message={error} /> : <p>Loading…</p>;
  const { run, nodes } = snapshot;
  // The agent's names; its type's name for a node the agent no longer has.
  const typeOf = new Map(nodes.nodes.map((node) => [node.original_node_id, node.node_type.node_type_name]));
  const nameOf = (original: string | null) => (original && names.get(original)) || typeOf.get(original) || "a node";
  const states = new Map<string, NodeState>(
    nodes.nodes.filter((node) => node.original_node_id).map((node) => [node.original_node_id as string, node]),
  );
  return (
    <section>
      <h1>
        Run <code>{run.run_id}</code>
      </h1>
      <p>
        Status: <span style={{ color: statusColour(run.status) }} aria-label="Run status">{run.status}</span>
        {run.progress && ` (${run.progress.done}/${run.progress.total} parts)`}
        {run.status_message && ` · ${run.status_message}`} · started {when(run.started_at)}
        {run.finished_at && ` · ended ${when(run.finished_at)}`} · agent <Link to={`/agents/${run.agent_id}`}>{run.agent_id}</Link>
      </p>
      <Problem message={error} />
      <Problem message={agent.error && `The agent's graph could not be read: ${agent.error}`} />
      {run.needs_credits && (
        <p role="alert" className="banner">
          This run is waiting for credits. <Link to="/credits">Add credits or upgrade the plan</Link>, then resume it.
        </p>
      )}
      <RunActions run={run} onChange={() => setRound((at) => at + 1)} />
      {run.errors.length > 0 && (
        <section aria-label="Errors">
          <h2>Errors</h2>
          <ul>
            {run.errors.map((group, at) => (
              <li key={at}>
                {nameOf(group.original_node_id)}: {group.messages.join("; ")}
              </li>
            ))}
          </ul>
        </section>
      )}
      {agent.value && (
        <Graph nodes={agent.value.agent_nodes} connections={agent.value.connections} names={names} states={states} />
      )}
      <h2 id="nodes-heading">Nodes</h2>
      <ul aria-label="Nodes" className="nodes">
        {nodes.nodes.map((node) => (
          <li key={node.agent_node_id}>
            <span className="dot" style={{ background: statusColour(node.status) }} />
            {nameOf(node.original_node_id)} <span className="status">{node.status}</span>
            {node.progress && ` ${node.progress.done}/${node.progress.total}`}
            {node.status_message && ` · ${node.status_message}`}
            {node.errors.length > 0 && ` · ${node.errors.join("; ")}`}
          </li>
        ))}
      </ul>
      <Outputs run={run} nameOf={nameOf} />
      <Timeline nodes={nodes} nameOf={nameOf} />
      <Deliveries id={run.run_id} live={isLive(run.status)} />
    </section>
  );
}

function RunActions({ run, onChange }: { run: RunRecord; onChange: () => void }) {
  const { busy, error, act } = useAction();
  const send = (what: "cancel" | "resume") =>
    act(async () => {
      await post(`/agent_run/${run.run_id}/${what}`);
      onChange();
    });
  return (
    <div className="actions">
      {canCancel(run) && (
        <button type="button" disabled={busy} onClick={() => send("cancel")}>
          Cancel run
        </button>
      )}
      {canResume(run) && (
        <button type="button" disabled={busy} onClick={() => send("resume")}>
          Resume run
        </button>
      )}
      <Problem message={error} />
    </div>
  );
}

function Outputs({ run, nameOf }: { run: RunRecord; nameOf: (id: string | null) => string }) {
  if (run.outputs.length === 0) return null;
  return (
    <section aria-label="Outputs">
      <h2>Outputs</h2>
      <div className="outputs">
        {run.outputs.map((output, at) => (
          <figure key={output.id}>
            <video src={output.video_url} controls preload="metadata" aria-label={`Output ${at + 1}`} width={320} />
            <figcaption>
              {nameOf(output.original_node_id)} · <a href={output.video_url}>video</a>
              {output.timeline_prproj_url && (
                <>
                  {" "}
                  · <a href={output.timeline_prproj_url}>timeline zip</a>
                </>
              )}
              {output.sources.length > 0 && (
                <details>
                  <summary>{output.sources.length} sources</summary>
                  <pre>{JSON.stringify(output.sources, null, 2)}</pre>
                </details>
              )}
            </figcaption>
          </figure>
        ))}
      </div>
    </section>
  );
}

function Timeline({ nodes, nameOf }: { nodes: RunNodes; nameOf: (id: string | null) => string }) {
  const names = new Map(nodes.nodes.map((node) => [node.original_node_id ?? "", nameOf(node.original_node_id)]));
  const shown = bars(nodes.nodes, names, Date.now());
  if (shown.length === 0) return null;
  return (
    <section aria-label="Timeline">
      <h2>Timeline</h2>
      <div className="timeline">
        {shown.map((bar, at) => (
          <div key={at} className="timeline-row" title={`${bar.label}: ${bar.seconds.toFixed(1)} s`}>
            <span className="timeline-label">{bar.label}</span>
            <span className="timeline-track">
              <span
                className="timeline-bar"
                style={{ left: `${bar.left * 100}%`, width: `${bar.width * 100}%`, background: statusColour(bar.status) }}
              />
            </span>
            <span>{bar.seconds.toFixed(1)} s</span>
          </div>
        ))}
      </div>
    </section>
  );
}

/** The delivery log, 100 a page: read when the page opens and when the run ends, and
 * on request (it is not polled: the run page's one call a second is the run's). */
function Deliveries({ id, live }: { id: string; live: boolean }) {
  const pages = usePages();
  const { value, error, reload } = useLoad(
    () =>
      get<{ deliveries: Delivery[]; next_cursor: string | null }>(
        `/agent_run/${id}/webhooks${query({ limit: 100, cursor: pages.cursor })}`,
      ),
    [id, live, pages.cursor],
  );
  const { error: problem, act } = useAction();
  if (!value || (value.deliveries.length === 0 && pages.first)) return error ? <Problem message={error} /> : null;
  const redeliver = (delivery: string) =>
    act(async () => {
      await post(`/agent_run/${id}/webhooks/${delivery}/redeliver`);
      reload();
    });
  return (
    <section aria-label="Webhook deliveries">
      <h2>Webhook deliveries</h2>
      <button type="button" onClick={reload}>
        Refresh the log
      </button>
      <Problem message={problem ?? error} />
      <table>
        <thead>
          <tr>
            <th>#</th>
            <th>Event</th>
            <th>State</th>
            <th>Attempts</th>
            <th>Created</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {value.deliveries.map((delivery) => (
            <tr key={delivery.delivery_id}>
              <td>{delivery.sequence}</td>
              <td>{delivery.event}</td>
              <td>{delivery.state}</td>
              <td>{delivery.attempts.length}</td>
              <td>{when(delivery.created_at)}</td>
              <td>
                <button type="button" onClick={() => redeliver(delivery.delivery_id)}>
                  Redeliver
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <Pager first={pages.first} nextCursor={value.next_cursor} onNext={() => pages.next(value.next_cursor)} onPrevious={pages.previous} />
    </section>
  );
}
