import { useEffect, useState, type FormEvent } from "react";
import { call, forgetKey, storedKey, storeKey, whenRefused } from "./api";
import { Problem, useAction } from "./common";
import { Agent } from "./views/Agent";
import { Agents } from "./views/Agents";
import { Avatars } from "./views/Avatars";
import { Credits } from "./views/Credits";
import { Run } from "./views/Run";
import { Runs } from "./views/Runs";
import { Social } from "./views/Social";
import { StoreEntries, Stores } from "./views/Stores";

const SECTIONS: [string, string][] = [
  ["/agents", "Agents"],
  ["/runs", "Runs"],
  ["/credits", "Credits"],
  ["/avatars", "Avatars"],
  ["/social", "Social posts"],
  ["/stores", "Shared stores"],
];

/** The view of a location hash (`#/agents/ID`), as a path and its parts. */
export function route(hash: string): string[] {
  const path = hash.replace(/^#/, "") || "/agents";
  return path.split("/").filter(Boolean);
}

function useHash(): string {
  const [hash, setHash] = useState(window.location.hash);
  useEffect(() => {
    const changed = () => setHash(window.location.hash);
    window.addEventListener("hashchange", changed);
    return () => window.removeEventListener("hashchange", changed);
  }, []);
  return hash;
}

export function App() {
  const [key, setKey] = useState(storedKey());
  const [refusal, setRefusal] = useState<string | null>(null);
  useEffect(() => {
    whenRefused((error) => {
      forgetKey();
      setRefusal(`Signed out: ${error.message}`);
      setKey(null);
    });
  }, []);
  if (!key) return <SignIn message={refusal} onSignedIn={(signedIn) => (setRefusal(null), setKey(signedIn))} />;
  return <Console onSignOut={() => (forgetKey(), setKey(null))} />;
}

function SignIn({ message, onSignedIn }: { message: string | null; onSignedIn: (key: string) => void }) {
  const [key, setKey] = useState("");
  const { busy, error: problem, act } = useAction(message);
  const signIn = (event: FormEvent) => {
    event.preventDefault();
    return act(async () => {
      // Checked before it is kept: a wrong key shows the API's message here.
      await call("GET", "/whoami", undefined, key.trim());
      storeKey(key.trim());
      onSignedIn(key.trim());
    });
  };
  return (
    <main className="sign-in">
      <h1>Console</h1>
      <form onSubmit={signIn}>
        <label>
          API key <input type="password" value={key} onChange={(event) => setKey(event.target.value)} autoComplete="off" required />
        </label>
        <button type="submit" disabled={busy}>
          Sign in
        </button>
        <Problem message={problem} />
      </form>
      <p>The key is kept in this tab only (sessionStorage) and sent to this service alone.</p>
    </main>
  );
}

function Console({ onSignOut }: { onSignOut: () => void }) {
  const parts = route(useHash());
  const [section, id] = parts;
  return (
    <>
      <header>
        <nav aria-label="Sections">
          {SECTIONS.map(([path, label]) => (
            <a key={path} href={`#${path}`} aria-current={`/${section}` === path ? "page" : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <button type="button" onClick={onSignOut}>
          Sign out
        </button>
      </header>
      <main>{view(section, id)}</main>
    </>
  );
}

function view(section: string | undefined, id: string | undefined) {
  switch (section) {
    case "agents":
      return id ? <Agent key={id} id={id} /> : <Agents />;
    case "runs":
      return id ? <Run key={id} id={id} /> : <Runs />;
    case "credits":
      return <Credits />;
    case "avatars":
      return <Avatars />;
    case "social":
      return <Social />;
    case "stores":
      return id ? <StoreEntries key={id} id={id} /> : <Stores />;
    default:
      return <Agents />;
  }
}
