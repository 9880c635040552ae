import { useState } from "react";
import { call, get } from "../api";
import { errorText, Link, Problem, useAction, useLoad, when } from "../common";
import type { Entry, Store } from "../types";

export function Stores() {
  const { value, error } = useLoad(() => get<{ stores: Store[] }>("/shared-stores"), []);
  return (
    <section>
      <h1>Shared stores</h1>
      <Problem message={error} />
      <ul>
        {value?.stores.map((store) => (
          <li key={store.id}>
            <Link to={`/stores/${store.id}`}>{store.name}</Link> ({store.source_type})
          </li>
        ))}
      </ul>
      {value && value.stores.length === 0 && <p>No shared stores.</p>}
    </section>
  );
}

export function StoreEntries({ id }: { id: string }) {
  const { value, error, reload } = useLoad(() => get<{ entries: Entry[] }>(`/shared-stores/${id}/entries`), [id]);
  const [editing, setEditing] = useState<string | null>(null);
  return (
    <section>
      <h1>Entries</h1>
      <Problem message={error} />
      <table>
        <thead>
          <tr>
            <th>Entry</th>
            <th>Display name</th>
            <th>Metadata</th>
            <th>Created</th>
          </tr>
        </thead>
        <tbody>
          {value?.entries.map((entry) => (
            <tr key={entry.entry_id}>
              <td>
                <code>{entry.entry_id}</code>
              </td>
              <td>{entry.display_name}</td>
              <td>
                {editing === entry.entry_id ? (
                  <EditEntry store={id} entry={entry} onDone={() => (setEditing(null), reload())} />
                ) : (
                  <>
                    <pre>{JSON.stringify(entry.metadata, null, 2)}</pre>
                    <button type="button" onClick={() => setEditing(entry.entry_id)}>
                      Edit {entry.display_name}
                    </button>
                  </>
                )}
              </td>
              <td>{when(entry.created_at)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

function EditEntry({ store, entry, onDone }: { store: string; entry: Entry; onDone: () => void }) {
  const [name, setName] = useState(entry.display_name);
  const [text, setText] = useState(JSON.stringify(entry.metadata, null, 2));
  const { error: problem, act } = useAction();
  const save = () =>
    act(async () => {
      let metadata: unknown;
      try {
        metadata = JSON.parse(text);
      } catch (failed) {
        throw new Error(`the metadata is not JSON: ${errorText(failed)}`);
      }
      await call("PUT", `/shared-stores/${store}/entries/${encodeURIComponent(entry.entry_id)}`, { display_name: name, metadata });
      onDone();
    });
  return (
    <div>
      <label>
        Display name <input value={name} onChange={(event) => setName(event.target.value)} />
      </label>
      <label>
        Metadata <textarea value={text} rows={8} cols={50} onChange={(event) => setText(event.target.value)} />
      </label>
      <button type="button" onClick={save}>
        Save
      </button>
      <Problem message={problem} />
    </div>
  );
}
