import { get, post, query } from "../api";
import { Pager, Problem, StatusFilter, useAction, useFilteredPages, useLoad, when } from "../common";
import type { SocialPost } from "../types";

const STATUSES = ["scheduled", "pending_approval", "processing", "posted", "partial_failure", "failed", "rejected"];

export function Social() {
  const { filter: status, setFilter: setStatus, pages } = useFilteredPages();
  const { value, error, reload } = useLoad(
    () =>
      get<{ posts: SocialPost[]; pagination: { next_cursor: string | null } }>(
        `/social/posts${query({ limit: 20, status, cursor: pages.cursor })}`,
      ),
    [status, pages.cursor],
  );
  const { error: problem, act } = useAction();
  const decide = (post_id: string, what: "approve" | "reject") =>
    act(async () => {
      await post(`/social/post/${post_id}/${what}`);
      reload();
    });
  return (
    <section>
      <h1>Social posts</h1>
      <StatusFilter statuses={STATUSES} value={status} onChange={setStatus} />
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
