import { Component, StrictMode, type ReactNode } from "react";
import { createRoot } from "react-dom/client";
import { App } from "./App";
import "./style.css";

/** A fault of the console itself is said in words, never a blank page. */
class Guard extends Component<{ children: ReactNode }, { fault: string | null }> {
  state = { fault: null as string | null };
  static getDerivedStateFromError(error: unknown) {
    return { fault: error instanceof Error ? error.message : String(error) };
  }
  // Another view is another chance: the fault is cleared when the location changes.
  private clear = () => this.setState({ fault: null });
  componentDidMount() {
    window.addEventListener("hashchange", this.clear);
  }
  componentWillUnmount() {
    window.removeEventListener("hashchange", this.clear);
  }
  render() {
    if (this.state.fault)
      return (
        <p role="alert" className="problem">
          The console failed to show this page ({this.state.fault}). <a href="#/agents">Back to agents</a>
        </p>
      );
    return this.props.children;
  }
}

createRoot(document.getElementById("root") as HTMLElement).render(
  <StrictMode>
    <Guard>
      <App />
    </Guard>
  </StrictMode>,
);
