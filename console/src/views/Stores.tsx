import { type FormEvent, useState } from "react";
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

// The fields are read from the form when it is sent, not from state: a Save clicked
// right after typing once sent the text from before it (a click that came before the
// state caught up), and the entry kept its old metadata.
function EditEntry({ store, entry, onDone }: { store: string; entry: Entry; onDone: () => void }) {
  const { error: problem, act } = useAction();
  const save = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault();
    const form = new FormData(event.currentTarget);
    const name = String(form.get("display_name") ?? "");
    const text = String(form.get("metadata") ?? "");
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
  };
  return (
    <form onSubmit={save}>
      <label>
        Display name <input name="display_name" defaultValue={entry.display_name} />
      </label>
      <label>
        Metadata <textarea name="metadata" defaultValue={JSON.stringify(entry.metadata, null, 2)} rows={8} cols={50} />
      </label>
      <button type="submit">Save</button>
      <Problem message={problem} />
    </form>
  );
}
