// How statuses look: a colour per status word, the word itself always shown beside it.

const COLOURS: Record<string, string> = {
  completed: "#1f883d",
  running: "#0969da",
  queued: "#8250df",
  not_started: "#6e7781",
  blocked: "#bf8700",
  partial_complete: "#bc4c00",
  failed: "#cf222e",
  cancelled: "#57606a",
};

export function statusColour(status: string): string {
  return COLOURS[status] ?? "#6e7781";
}

/** Whether the run can still change by itself (the page keeps polling it). */
export function isLive(status: string): boolean {
  return status === "running";
}

/** The contract: a run can be cancelled while running, resumed when failed or
 * cancelled, or when it ended partly complete waiting for credits. */
export function canCancel(run: { status: string }): boolean {
  return run.status === "running";
}

export function canResume(run: { status: string; needs_credits: boolean }): boolean {
  return run.status === "failed" || run.status === "cancelled" || (run.status === "partial_complete" && run.needs_credits);
}
