import { describe, expect, it } from "vitest";
import { ApiError } from "./api";
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
  it("stops for good on a refusal, and backs off on failures that may pass", async () => {
    const clock = fakeClock();
    const answers = [new ApiError(503, "busy"), new ApiError(503, "busy"), new ApiError(429, "slow down"), 1, new ApiError(404, "Not Found")];
    let calls = 0;
    poll(
      async () => {
        const answer = answers[calls++];
        if (answer instanceof Error) throw answer;
        return answer;
      },
      () => true,
      () => {},
      1000,
      clock,
    );
    for (let at = 0; at < 20; at++) await settle();
    expect(calls).toBe(5);
    expect(clock.waits).toEqual([2000, 4000, 8000, 1000]);
  });

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

/** A run whose answers come from `script`: each call takes the next state. */
function scripted(states: { nodes: RunNodes; record: RunRecord }[]) {
  const calls: string[] = [];
  let at = 0;
  const state = () => states[Math.min(at++, states.length - 1)];
  const tick = refresher(
    async () => (calls.push("record"), state().record),
    async () => (calls.push("nodes"), state().nodes),
  );
  return { calls, tick };
}

const running = { nodes: nodes("running", ["running"]), record: record("running") };
const done = { nodes: nodes("completed", ["completed"]), record: record("completed") };

describe("refresher", () => {
  it("makes one call a tick: the nodes, and the record on the tick after they changed", async () => {
    const { calls, tick } = scripted([running, running, running, done, done]);
    const first = await tick();
    expect(calls.splice(0)).toEqual(["nodes", "record"]);
    expect(first.current).toBe(true);
    expect((await tick()).current).toBe(true);
    expect(calls.splice(0)).toEqual(["nodes"]);
    const changed = await tick();
    expect(calls.splice(0)).toEqual(["nodes"]);
    expect(changed.current).toBe(false);
    const read = await tick();
    expect(calls.splice(0)).toEqual(["record"]);
    expect(read.run.status).toBe("completed");
    expect(read.current).toBe(true);
  });

  it("keeps going when the run ends between the nodes' read and the record's", async () => {
    // Opening: the nodes say running, the record (read just after) completed.
    const { calls, tick } = scripted([running, done]);
    const first = await tick();
    expect(first.current).toBe(false);
    const nodesAgain = await tick();
    expect(nodesAgain.nodes.status).toBe("completed");
    // The record had ended: it is final, so the nodes that caught up need no new read.
    expect(nodesAgain.current).toBe(true);
    expect(calls).toEqual(["nodes", "record", "nodes"]);
  });

  it("keeps going when the record read after a change has already ended", async () => {
    const half = { nodes: nodes("running", ["completed", "running"]), record: record("running") };
    const start = { nodes: nodes("running", ["running", "running"]), record: record("running") };
    const end = { nodes: nodes("completed", ["completed", "completed"]), record: record("completed") };
    // Open, a node ends (the record is behind), the record is read once the run ended.
    const { tick } = scripted([start, start, half, end]);
    await tick();
    expect((await tick()).current).toBe(false);
    const behind = await tick();
    expect(behind.run.status).toBe("completed");
    expect(behind.nodes.nodes[1].status).toBe("running");
    expect(behind.current).toBe(false);
    const nodesAgain = await tick();
    expect(nodesAgain.nodes.nodes[1].status).toBe("completed");
    expect(nodesAgain.current).toBe(true);
  });

  it("reads the record again when the nodes' status is not the record's (a resume from elsewhere)", async () => {
    const failedRecord = { nodes: nodes("running", ["running"]), record: record("failed") };
    // Open: the nodes say running, the record (read just after) failed; then the run is
    // resumed elsewhere and the nodes say running again, unchanged.
    const { calls, tick } = scripted([running, failedRecord, running, running]);
    expect((await tick()).current).toBe(false);
    expect((await tick()).current).toBe(false);
    const reread = await tick();
    expect(reread.run.status).toBe("running");
    expect(reread.current).toBe(true);
    expect(calls).toEqual(["nodes", "record", "nodes", "record"]);
  });

  it("reads only the record again after a record that failed", async () => {
    const calls: string[] = [];
    let fail = true;
    const tick = refresher(
      async () => {
        calls.push("record");
        if (fail) throw new Error("the service is temporarily unavailable");
        return record("running");
      },
      async () => (calls.push("nodes"), nodes("running", ["running"])),
    );
    await expect(tick()).rejects.toThrow();
    fail = false;
    await tick();
    expect(calls).toEqual(["nodes", "record", "record"]);
  });
});
