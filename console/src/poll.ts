import type { RunNodes, RunRecord, Snapshot } from "./types";

// Polls while a page is open: one call at a time, the next no sooner than `interval`
// after the previous one started (at most one call per second per page by default),
// stopped when the page closes or `live` says the thing has ended.

export interface Poller {
  stop(): void;
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
    while (!stopped) {
      const started = clock.now();
      let keepGoing = true;
      try {
        const value = await load();
        if (stopped) return;
        deliver(value);
        keepGoing = live(value);
      } catch (error) {
        if (stopped) return;
        deliver(error instanceof Error ? error : new Error(String(error)));
      }
      if (!keepGoing) return;
      const elapsed = clock.now() - started;
      await clock.wait(Math.max(interval - elapsed, 0));
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
 * changed. So the API sees one call a second (two, once, when the page opens).
 * `current` is false while the record is older than the nodes: keep polling.
 */
export function refresher(
  record: () => Promise<RunRecord>,
  nodes: () => Promise<RunNodes>,
): () => Promise<Snapshot & { current: boolean }> {
  let last: Snapshot | null = null;
  let stale = true;
  return async () => {
    if (last === null) {
      const run = await record();
      last = { run, nodes: await nodes() };
      stale = false;
    } else if (stale) {
      last = { ...last, run: await record() };
      stale = false;
    } else {
      const fresh = await nodes();
      stale = signature(fresh) !== signature(last.nodes);
      // The nodes' answer carries the run's status too.
      last = { run: { ...last.run, status: fresh.status }, nodes: fresh };
    }
    return { ...last, current: !stale };
  };
}

function signature(nodes: RunNodes): string {
  return JSON.stringify([
    nodes.status,
    nodes.nodes.map((node) => [node.status, node.progress?.done, node.needs_credits, node.outputs.length]),
  ]);
}
