import { describe, expect, it } from "vitest";
import { poll, refresher } from "./poll";
import type { RunNodes, RunRecord } from "./types";

/** A clock whose waits are recorded and pass at once. */
function fakeClock() {
  let now = 0;
  const waits: number[] = [];
  return {
    waits,
    now: () => now,
    wait: async (ms: number) => {
      waits.push(ms);
      now += ms;
    },
    advance: (ms: number) => (now += ms),
  };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

describe("poll", () => {
  it("waits out the rest of the interval after each call and stops when the value ends", async () => {
    const clock = fakeClock();
    let calls = 0;
    const seen: unknown[] = [];
    poll(
      async () => {
        calls += 1;
        clock.advance(300);
        return calls;
      },
      (value) => value < 3,
      (value) => seen.push(value),
      1000,
      clock,
    );
    for (let at = 0; at < 10; at++) await settle();
    expect(seen).toEqual([1, 2, 3]);
    expect(clock.waits).toEqual([700, 700]);
  });

  it("keeps polling after an error and delivers it", async () => {
    const clock = fakeClock();
    let calls = 0;
    const seen: unknown[] = [];
    const poller = poll(
      async () => {
        calls += 1;
        if (calls === 1) throw new Error("the service is temporarily unavailable");
        return calls;
      },
      () => calls < 2,
      (value) => seen.push(value instanceof Error ? value.message : value),
      1000,
      clock,
    );
    for (let at = 0; at < 10; at++) await settle();
    poller.stop();
    expect(seen).toEqual(["the service is temporarily unavailable", 2]);
  });
});

function nodes(status: string, statuses: string[]): RunNodes {
  return {
    run_id: "r",
    status: status as RunNodes["status"],
    nodes: statuses.map((one, at) => ({
      agent_node_id: `n${at}`,
      original_node_id: `o${at}`,
      node_type: { node_type_id: "t", node_type_name: "Speed" },
      status: one,
      status_message: null,
      errors: [],
      outputs: [],
      needs_credits: false,
    })),
  };
}

const record = (status: string) => ({ run_id: "r", status }) as unknown as RunRecord;

describe("refresher", () => {
  it("makes one call a tick: the nodes, and the record on the tick after they changed", async () => {
    const calls: string[] = [];
    const answers = [nodes("running", ["running"]), nodes("running", ["running"]), nodes("completed", ["completed"])];
    let at = 0;
    const tick = refresher(
      async () => (calls.push("record"), record(at >= 3 ? "completed" : "running")),
      async () => (calls.push("nodes"), answers[Math.min(at++, answers.length - 1)]),
    );
    const first = await tick();
    expect(calls).toEqual(["record", "nodes"]);
    expect(first.current).toBe(true);
    calls.length = 0;
    const unchanged = await tick();
    expect(calls).toEqual(["nodes"]);
    expect(unchanged.current).toBe(true);
    calls.length = 0;
    const changed = await tick();
    expect(calls).toEqual(["nodes"]);
    expect(changed.run.status).toBe("completed");
    expect(changed.current).toBe(false);
    calls.length = 0;
    const read = await tick();
    expect(calls).toEqual(["record"]);
    expect(read.current).toBe(true);
  });
});
