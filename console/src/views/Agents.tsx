import { get, query } from "../api";
import { Link, Pager, Problem, useFilteredPages, useLoad, when } from "../common";
import type { Agent } from "../types";

export function Agents() {
  const { filter: name, setFilter: setName, pages } = useFilteredPages();
  const { value, error } = useLoad(
    () => get<{ agents: Agent[]; next_cursor: string | null }>(`/agents${query({ limit: 25, name, cursor: pages.cursor })}`),
    [name, pages.cursor],
  );
  return (
    <section>
      <h1>Agents</h1>
      <label>
        Search by name{" "}
        <input
          type="search"
          value={name}
          onChange={(event) => setName(event.target.value)}
        />
      </label>
      <Problem message={error} />
      {value && (
        <>
          <table>
            <thead>
              <tr>
                <th>Name</th>
                <th>Description</th>
                <th>Updated</th>
              </tr>
            </thead>
            <tbody>
              {value.agents.map((agent) => (
                <tr key={agent.id}>
                  <td>
                    <Link to={`/agents/${agent.id}`}>{agent.name}</Link>
                  </td>
                  <td>{agent.description}</td>
                  <td>{when(agent.updated_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {value.agents.length === 0 && <p>No agents{name && ` whose name contains “${name}”`}.</p>}
          <Pager
            first={pages.first}
            nextCursor={value.next_cursor}
            onNext={() => pages.next(value.next_cursor)}
            onPrevious={pages.previous}
          />
        </>
      )}
    </section>
  );
}
