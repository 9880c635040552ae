// Small pieces every view uses: loading a value with its error shown as the API's
// message, links inside the console, and dates.
import { useCallback, useEffect, useState, type ReactNode } from "react";
import { ApiError } from "./api";

export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): {
  value: T | null;
  error: string | null;
  reload: () => void;
} {
  const [value, setValue] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [round, setRound] = useState(0);
  useEffect(() => {
    let current = true;
    setError(null);
    load().then(
      (loaded) => current && setValue(loaded),
      (failed) => current && setError(errorText(failed)),
    );
    return () => {
      current = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, round]);
  const reload = useCallback(() => setRound((at) => at + 1), []);
  return { value, error, reload };
}

export function errorText(error: unknown): string {
  if (error instanceof ApiError) return error.message;
  if (error instanceof Error) return error.message;
  return String(error);
}

export function Problem({ message }: { message: string | null }) {
  if (!message) return null;
  return (
    <p role="alert" className="problem">
      {message}
    </p>
  );
}

export function Link({ to, children, label }: { to: string; children: ReactNode; label?: string }) {
  return (
    <a href={`#${to}`} aria-label={label}>
      {children}
    </a>
  );
}

export function when(time: string | null | undefined): string {
  if (!time) return "—";
  const date = new Date(time);
  return Number.isNaN(date.getTime()) ? time : date.toLocaleString();
}

/** Pages of a list read with `next_cursor`: the cursors of the pages seen, to go back. */
export function usePages(): {
  cursor: string | null;
  next: (cursor: string | null) => void;
  previous: () => void;
  first: boolean;
  reset: () => void;
} {
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  return {
    cursor: cursors[cursors.length - 1],
    next: (cursor) => cursor && setCursors((seen) => [...seen, cursor]),
    previous: () => setCursors((seen) => (seen.length > 1 ? seen.slice(0, -1) : seen)),
    first: cursors.length === 1,
    reset: () => setCursors([null]),
  };
}

export function Pager(props: { first: boolean; nextCursor: string | null; onNext: () => void; onPrevious: () => void }) {
  return (
    <nav className="pager" aria-label="Pages">
      <button type="button" disabled={props.first} onClick={props.onPrevious}>
        Previous page
      </button>
      <button type="button" disabled={!props.nextCursor} onClick={props.onNext}>
        Next page
      </button>
    </nav>
  );
}

/** A list's filter and its pages: changing the filter goes back to the first page. */
export function useFilteredPages(): {
  filter: string;
  setFilter: (value: string) => void;
  pages: ReturnType<typeof usePages>;
} {
  const [filter, set] = useState("");
  const pages = usePages();
  return {
    filter,
    setFilter: (value) => {
      pages.reset();
      set(value);
    },
    pages,
  };
}

/** A select of statuses, "any" first. */
export function StatusFilter(props: { statuses: string[]; value: string; onChange: (value: string) => void }) {
  return (
    <label>
      Status{" "}
      <select value={props.value} onChange={(event) => props.onChange(event.target.value)}>
        <option value="">any</option>
        {props.statuses.map((one) => (
          <option key={one}>{one}</option>
        ))}
      </select>
    </label>
  );
}

/** An action a person starts (a click, a form): busy while it runs, and its failure
 * shown as the API's message. */
export function useAction(initial: string | null = null): {
  busy: boolean;
  error: string | null;
  setError: (message: string | null) => void;
  act: (work: () => Promise<void>) => Promise<void>;
} {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(initial);
  const act = useCallback(async (work: () => Promise<void>) => {
    setBusy(true);
    setError(null);
    try {
      await work();
    } catch (failed) {
      setError(errorText(failed));
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, setError, act };
}
