import { useState } from "react";
import { get, post, query } from "../api";
import { errorText, Pager, Problem, useLoad, usePages, when } from "../common";
import type { SocialPost } from "../types";

const STATUSES = ["scheduled", "pending_approval", "processing", "posted", "partial_failure", "failed", "rejected"];

export function Social() {
  const [status, setStatus] = useState("");
  const pages = usePages();
  const { value, error, reload } = useLoad(
    () =>
      get<{ posts: SocialPost[]; pagination: { next_cursor: string | null } }>(
        `/social/posts${query({ limit: 20, status, cursor: pages.cursor })}`,
      ),
    [status, pages.cursor],
  );
  const [problem, setProblem] = useState<string | null>(null);
  async function decide(post_id: string, what: "approve" | "reject") {
    setProblem(null);
    try {
      await post(`/social/post/${post_id}/${what}`);
      reload();
    } catch (failed) {
      setProblem(errorText(failed));
    }
  }
  return (
    <section>
      <h1>Social posts</h1>
      <label>
        Status{" "}
        <select
          value={status}
          onChange={(event) => {
            pages.reset();
            setStatus(event.target.value);
          }}
        >
          <option value="">any</option>
          {STATUSES.map((one) => (
            <option key={one}>{one}</option>
          ))}
        </select>
      </label>
      <Problem message={error ?? problem} />
      {value && (
        <>
          <ul aria-label="Posts" className="posts">
            {value.posts.map((item) => (
              <li key={item.post_id}>
                <span className="status">{item.status}</span> · {item.description} · {item.platforms.join(", ")} · scheduled{" "}
                {when(item.scheduled_at)}
                {item.error && ` · ${item.error}`}
                {item.status === "pending_approval" && (
                  <>
                    {" "}
                    <button type="button" onClick={() => decide(item.post_id, "approve")}>
                      Approve
                    </button>{" "}
                    <button type="button" onClick={() => decide(item.post_id, "reject")}>
                      Reject
                    </button>
                  </>
                )}
              </li>
            ))}
          </ul>
          {value.posts.length === 0 && <p>No posts.</p>}
          <Pager
            first={pages.first}
            nextCursor={value.pagination.next_cursor}
            onNext={() => pages.next(value.pagination.next_cursor)}
            onPrevious={pages.previous}
          />
        </>
      )}
    </section>
  );
}
