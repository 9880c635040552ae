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
