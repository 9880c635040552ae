import { get } from "../api";
import { Problem, useLoad } from "../common";
import { statusColour } from "../status";
import type { AvatarProfile } from "../types";

export function Avatars() {
  const { value, error } = useLoad(() => get<{ avatar_profiles: AvatarProfile[] }>("/avatar-profiles"), []);
  return (
    <section>
      <h1>Avatars</h1>
      <Problem message={error} />
      {value && value.avatar_profiles.length === 0 && <p>No avatars yet.</p>}
      <div className="outputs">
        {value?.avatar_profiles.map((avatar) => (
          <figure key={avatar.id}>
            {avatar.video_preview_url ? (
              <video src={avatar.video_preview_url} controls preload="metadata" width={240} aria-label={`Preview of ${avatar.name}`} />
            ) : (
              <div className="no-preview">no preview yet</div>
            )}
            <figcaption>
              {avatar.name} · <span style={{ color: statusColour(avatar.status === "ready" ? "completed" : avatar.status) }}>{avatar.status}</span>
              {avatar.status_message && ` · ${avatar.status_message}`}
            </figcaption>
          </figure>
        ))}
      </div>
    </section>
  );
}
