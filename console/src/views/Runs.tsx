import { get, query } from "../api";
import { Link, Pager, Problem, StatusFilter, useFilteredPages, useLoad, when } from "../common";
import { statusColour } from "../status";
import type { RunSummary } from "../types";

const STATUSES = ["running", "completed", "partial_complete", "failed", "cancelled"];

export function Runs() {
  const { filter: status, setFilter: setStatus, pages } = useFilteredPages();
  const { value, error } = useLoad(
    () => get<{ runs: RunSummary[]; next_cursor: string | null }>(`/agent_runs${query({ limit: 25, status, cursor: pages.cursor })}`),
    [status, pages.cursor],
  );
  return (
    <section>
      <h1>Runs</h1>
      <StatusFilter statuses={STATUSES} value={status} onChange={setStatus} />
      <Problem message={error} />
      {value && (
        <>
          <table>
            <thead>
              <tr>
                <th>Run</th>
                <th>Status</th>
                <th>Agent</th>
                <th>Started</th>
                <th>Nodes done / running / failed</th>
              </tr>
            </thead>
            <tbody>
              {value.runs.map((run) => (
                <tr key={run.run_id}>
                  <td>
                    <Link to={`/runs/${run.run_id}`}>{run.run_id}</Link>
                  </td>
                  <td style={{ color: statusColour(run.status) }}>{run.status}</td>
                  <td>
                    <Link to={`/agents/${run.agent_id}`}>{run.agent_id}</Link>
                  </td>
                  <td>{when(run.started_at)}</td>
                  <td>
                    {run.node_status_counts.completed} / {run.node_status_counts.in_progress} / {run.node_status_counts.failed}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {value.runs.length === 0 && <p>No runs.</p>}
          <Pager first={pages.first} nextCursor={value.next_cursor} onNext={() => pages.next(value.next_cursor)} onPrevious={pages.previous} />
        </>
      )}
    </section>
  );
}
