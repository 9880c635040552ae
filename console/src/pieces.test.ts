import { describe, expect, it } from "vitest";
import { messageOf, query } from "./api";
import { route } from "./App";
import { nodeNames } from "./names";
import { canCancel, canResume } from "./status";
import { bars } from "./timeline";
import type { AgentNode, RunNode } from "./types";

describe("messageOf", () => {
  it("shows the API's detail or error, else the status", () => {
    expect(messageOf(401, { detail: "invalid_api_key" })).toBe("invalid_api_key");
    expect(messageOf(404, { error: "Shared store not found" })).toBe("Shared store not found");
    expect(messageOf(502, null)).toBe("the service answered 502");
    // API Gateway's own answers (throttling, timeouts) say `message`.
    expect(messageOf(429, { message: "Too Many Requests" })).toBe("Too Many Requests");
  });
});

describe("query", () => {
  it("keeps only the values given", () => {
    expect(query({ limit: 25, name: "", cursor: null })).toBe("?limit=25");
    expect(query({ name: "a b&c" })).toBe("?name=a+b%26c");
    expect(query({})).toBe("");
  });
});

describe("route", () => {
  it("reads the view from the fragment, agents by default", () => {
    expect(route("")).toEqual(["agents"]);
    expect(route("#/runs/abc")).toEqual(["runs", "abc"]);
  });
});

const node = (id: string, type: string): AgentNode => ({
  agent_node_id: id,
  node_type: { node_type_id: "t", node_type_name: type },
  params_used: {},
});

describe("nodeNames", () => {
  it("numbers the types an agent has several of", () => {
    const names = nodeNames([node("a", "Video Input"), node("b", "Speed"), node("c", "Speed")]);
    expect([...names.values()]).toEqual(["Video Input", "Speed 1", "Speed 2"]);
  });
});

describe("actions", () => {
  it("cancels a running run and resumes a failed or cancelled one, or one that waits for credits", () => {
    const statuses = ["running", "completed", "failed", "cancelled", "partial_complete"];
    const runs = statuses.map((status) => ({ status, needs_credits: false }));
    expect(runs.map(canCancel)).toEqual([true, false, false, false, false]);
    expect(runs.map(canResume)).toEqual([false, false, true, true, false]);
    expect(canResume({ status: "partial_complete", needs_credits: true })).toBe(true);
    expect(canResume({ status: "completed", needs_credits: true })).toBe(false);
  });
});

describe("bars", () => {
  it("puts each timed node on one axis from the first start to the last end", () => {
    const timed = (id: string, start: string, end: string | null): RunNode => ({
      agent_node_id: id,
      original_node_id: id,
      node_type: { node_type_id: "t", node_type_name: "Speed" },
      status: end ? "completed" : "running",
      status_message: null,
      errors: [],
      outputs: [],
      needs_credits: false,
      started_at: start,
      finished_at: end,
    });
    const now = Date.parse("2026-01-01T00:00:10Z");
    const shown = bars(
      [
        timed("b", "2026-01-01T00:00:05Z", null),
        timed("a", "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"),
        { ...timed("c", "", null), started_at: null },
      ],
      new Map([["a", "First"], ["b", "Second"]]),
      now,
    );
    expect(shown.map((bar) => [bar.label, bar.left, bar.width, bar.seconds])).toEqual([
      ["First", 0, 0.5, 5],
      ["Second", 0.5, 0.5, 5],
    ]);
  });
});
