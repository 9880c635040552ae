import { describe, expect, it } from "vitest";
import { layout, NODE_HEIGHT, NODE_WIDTH } from "./layout";

describe("layout", () => {
  it("places a chain left to right, one rank per step", () => {
    const placed = layout(["a", "b", "c"], [["a", "b"], ["b", "c"]]);
    const [a, b, c] = ["a", "b", "c"].map((id) => placed.get(id)!);
    expect(a.x).toBeLessThan(b.x);
    expect(b.x).toBeLessThan(c.x);
    expect(b.x - a.x).toBeGreaterThanOrEqual(NODE_WIDTH);
  });

  it("keeps the branches of a fan-out apart", () => {
    const ids = ["in", "x", "y", "z"];
    const placed = layout(ids, [["in", "x"], ["in", "y"], ["in", "z"]]);
    const ys = ["x", "y", "z"].map((id) => placed.get(id)!.y).sort((p, q) => p - q);
    expect(ys[1] - ys[0]).toBeGreaterThanOrEqual(NODE_HEIGHT);
    expect(ys[2] - ys[1]).toBeGreaterThanOrEqual(NODE_HEIGHT);
    expect(new Set(["x", "y", "z"].map((id) => placed.get(id)!.x)).size).toBe(1);
  });

  it("places every node, ignoring edges to nodes it does not know", () => {
    const ids = Array.from({ length: 200 }, (_, at) => `n${at}`);
    const edges: [string, string][] = ids.slice(1).map((id, at) => [ids[at], id]);
    edges.push(["n3", "ghost"]);
    const placed = layout(ids, edges);
    expect(placed.size).toBe(200);
    for (const point of placed.values()) expect(Number.isFinite(point.x) && Number.isFinite(point.y)).toBe(true);
  });
});
