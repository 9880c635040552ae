import { useState, type FormEvent } from "react";
import { post, sendFile } from "../api";
import { Problem, useAction } from "../common";
import type { AgentDetail } from "../types";

interface Ticket {
  id: string;
  upload_url: string;
  upload_method: string;
  upload_headers: Record<string, string>;
}

/** Uploads a file through the uploads flow (or takes URLs), starts the run, goes to it. */
export function StartRun({ agent }: { agent: AgentDetail }) {
  const [file, setFile] = useState<File | null>(null);
  const [urls, setUrls] = useState("");
  const [callback, setCallback] = useState("");
  const [progress, setProgress] = useState<number | null>(null);
  const { busy, error, act } = useAction();

  const start = (event: FormEvent) => {
    event.preventDefault();
    return act(async () => {
      let body: Record<string, unknown> = {};
      if (file) {
        const ticket = await post<Ticket>("/uploads/video/get_upload_url", { content_type: file.type || "video/mp4" });
        setProgress(0);
        await sendFile(ticket, file, setProgress);
        await post("/uploads/video/finalize_upload", { id: ticket.id });
        body = { video_ids: [ticket.id] };
      } else {
        const list = urls.split(/\s+/).filter(Boolean);
        if (list.length > 0) body = { video_urls: list };
      }
      if (callback.trim()) body.callback_url = callback.trim();
      const started = await post<{ run_id: string }>(`/agent/${agent.agent.id}/run`, body);
      window.location.hash = `/runs/${started.run_id}`;
    });
  };

  return (
    <form className="start-run" onSubmit={start} aria-label="Start a run">
      <label>
        Video file <input type="file" accept="video/*" onChange={(event) => setFile(event.target.files?.[0] ?? null)} />
      </label>
      <label>
        Or video URLs (one per line)
        <textarea value={urls} onChange={(event) => setUrls(event.target.value)} rows={2} />
      </label>
      <label>
        Webhook URL (optional) <input type="url" value={callback} onChange={(event) => setCallback(event.target.value)} />
      </label>
      {progress !== null && (
        <label>
          Upload <progress value={progress} max={1} aria-label="Upload progress" /> {Math.round(progress * 100)}%
        </label>
      )}
      <Problem message={error} />
      <button type="submit" disabled={busy}>
        Start run
      </button>
    </form>
  );
}
