import { ApiError } from "./api";
import { isLive } from "./status";
import type { RunNodes, RunRecord, Snapshot } from "./types";

// Polls while a page is open: one call at a time, the next no sooner than `interval`
// after the previous one started (at most one call per second per page by default),
// stopped when the page closes, when `live` says the thing has ended, or when the API
// refuses for good (a 4xx other than 408 and 429: a wrong ID, no access, a refused key).
// After a failure that may pass (429, 5xx, no network) it waits twice as long each
// time, up to `MAX_BACKOFF_MS`.

export interface Poller {
  stop(): void;
}

export const MAX_BACKOFF_MS = 15_000;

/** Whether asking again cannot change the answer. */
export function isFinal(error: unknown): boolean {
  return error instanceof ApiError && error.status >= 400 && error.status < 500 && ![408, 429].includes(error.status);
}

export function poll<T>(
  load: () => Promise<T>,
  live: (value: T) => boolean,
  deliver: (value: T | Error) => void,
  interval = 1000,
  clock: { now(): number; wait(ms: number): Promise<void> } = {
    now: () => Date.now(),
    wait: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  },
): Poller {
  let stopped = false;
  (async () => {
    let pause = interval;
    while (!stopped) {
      const started = clock.now();
      try {
        const value = await load();
        if (stopped) return;
        deliver(value);
        if (!live(value)) return;
        pause = interval;
      } catch (error) {
        if (stopped) return;
        deliver(error instanceof Error ? error : new Error(String(error)));
        if (isFinal(error)) return;
        pause = Math.min(pause * 2, MAX_BACKOFF_MS);
      }
      const elapsed = clock.now() - started;
      await clock.wait(Math.max(pause - elapsed, 0));
    }
  })();
  return {
    stop() {
      stopped = true;
    },
  };
}

/**
 * One call per tick for a run page: the nodes (statuses and progress) each tick, and
 * the run's record (outputs, errors, credits) instead on the tick after the nodes
 * changed. So the API sees one call a second (two, once, when the page opens: the
 * nodes, then the record).
 *
 * The record and the nodes are read at different times, so they may disagree: the run
 * may end between the two reads. `current` is true only when the record was read after
 * the nodes last changed and both give the run the same status; the page polls until
 * it is, and until the run has ended.
 */
export function refresher(
  record: () => Promise<RunRecord>,
  nodes: () => Promise<RunNodes>,
): () => Promise<Snapshot & { current: boolean }> {
  let run: RunRecord | null = null;
  let seen: RunNodes | null = null;
  // The record was read before the nodes last changed (or not at all).
  let recordBehind = true;
  return async () => {
    if (seen === null) {
      // First the nodes, then the record: read after them, it is never the older.
      seen = await nodes();
      run = await record();
      recordBehind = false;
    } else if (recordBehind || run === null) {
      run = await record();
      recordBehind = false;
    } else {
      const fresh = await nodes();
      // An ended run's record is final: nodes that caught up with it need no new read.
      const caughtUp = !isLive(run.status) && fresh.status === run.status;
      // Changed nodes, or a status the record does not have (a resume from elsewhere).
      if (!caughtUp && (signature(fresh) !== signature(seen) || fresh.status !== run.status)) recordBehind = true;
      seen = fresh;
    }
    // A record that ended after the nodes shown were read: the nodes are read again on
    // the next tick, then the record once more, until both tell the same.
    return { run, nodes: seen, current: !recordBehind && run.status === seen.status };
  };
}

function signature(nodes: RunNodes): string {
  return JSON.stringify([
    nodes.status,
    nodes.nodes.map((node) => [node.status, node.progress?.done, node.needs_credits, node.outputs.length]),
  ]);
}
