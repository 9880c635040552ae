import { useState, type FormEvent } from "react";
import { get, post, query } from "../api";
import { Pager, Problem, useAction, useLoad, usePages, when } from "../common";
import type { LedgerEntry } from "../types";

interface AutoTopUp {
  enabled: boolean;
  threshold: number;
  quantity: number;
  monthly_limit: number;
  cover_shortfall: boolean;
}
interface Credits {
  balance: number;
  usage: number;
  auto_topup: AutoTopUp;
}
interface Plan {
  plan: { id: string; status: string; current_period_end: string };
}
interface Offer {
  id: string;
  billing: string;
  price_usd: number;
  credits_per_month: number;
}

export function Credits() {
  const credits = useLoad(() => get<Credits>("/credits"), []);
  const plan = useLoad(() => get<Plan>("/plan"), []);
  const offers = useLoad(() => get<{ plans: Offer[] }>("/plan/list"), []);
  const pages = usePages();
  const ledger = useLoad(
    () => get<{ entries: LedgerEntry[]; next_cursor: string | null }>(`/credits/ledger${query({ limit: 50, cursor: pages.cursor })}`),
    [pages.cursor],
  );
  const { error: problem, act } = useAction();

  const upgrade = (plan_id: string) =>
    act(async () => {
      // The checkout comes back here, paid or not.
      const back = `${window.location.origin}${window.location.pathname}#/credits`;
      const answer = await post<{ requires_checkout: boolean; checkout_url?: string }>("/plan/upgrade", {
        plan_id,
        success_url: back,
        cancel_url: back,
      });
      if (answer.requires_checkout && answer.checkout_url) window.location.assign(answer.checkout_url);
      else {
        plan.reload();
        credits.reload();
      }
    });

  return (
    <section>
      <h1>Credits</h1>
      <Problem message={credits.error ?? plan.error} />
      {credits.value && (
        <p>
          Balance <strong aria-label="Balance">{credits.value.balance}</strong> credits · used this period {credits.value.usage}
        </p>
      )}
      {plan.value && (
        <p>
          Plan <strong>{plan.value.plan.id}</strong> ({plan.value.plan.status}), period ends {when(plan.value.plan.current_period_end)}
        </p>
      )}
      {credits.value && <TopUp current={credits.value.auto_topup} onSaved={credits.reload} />}
      <h2>Plans</h2>
      <Problem message={problem ?? offers.error} />
      <ul>
        {offers.value?.plans.map((offer) => (
          <li key={offer.id}>
            {offer.id} · ${offer.price_usd} ({offer.billing}) · {offer.credits_per_month} credits a month{" "}
            {plan.value?.plan.id !== offer.id && (
              <button type="button" onClick={() => upgrade(offer.id)}>
                Upgrade to {offer.id}
              </button>
            )}
          </li>
        ))}
      </ul>
      <h2>Ledger</h2>
      <Problem message={ledger.error} />
      {ledger.value && (
        <>
          <BalanceChart entries={ledger.value.entries} />
          <table>
            <thead>
              <tr>
                <th>When</th>
                <th>Reason</th>
                <th>Amount</th>
                <th>Balance after</th>
                <th>Run</th>
              </tr>
            </thead>
            <tbody>
              {ledger.value.entries.map((entry) => (
                <tr key={entry.entry_id}>
                  <td>{when(entry.created_at)}</td>
                  <td>{entry.reason}</td>
                  <td>{entry.amount}</td>
                  <td>{entry.balance_after}</td>
                  <td>{entry.run_id && <a href={`#/runs/${entry.run_id}`}>{entry.run_id}</a>}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <Pager first={pages.first} nextCursor={ledger.value.next_cursor} onNext={() => pages.next(ledger.value?.next_cursor ?? null)} onPrevious={pages.previous} />
        </>
      )}
    </section>
  );
}

function TopUp({ current, onSaved }: { current: AutoTopUp; onSaved: () => void }) {
  const [settings, setSettings] = useState(current);
  const { error: problem, act } = useAction();
  const [saved, setSaved] = useState(false);
  const save = (event: FormEvent) => {
    event.preventDefault();
    setSaved(false);
    return act(async () => {
      await post("/credits/settings", { auto_topup: settings });
      setSaved(true);
      onSaved();
    });
  };
  const number = (field: keyof AutoTopUp) => (
    <label>
      {field.replaceAll("_", " ")}{" "}
      <input
        type="number"
        value={Number(settings[field])}
        onChange={(event) => setSettings({ ...settings, [field]: Number(event.target.value) })}
      />
    </label>
  );
  return (
    <form onSubmit={save} aria-label="Auto top-up">
      <h2>Auto top-up</h2>
      <label>
        <input type="checkbox" checked={settings.enabled} onChange={(event) => setSettings({ ...settings, enabled: event.target.checked })} /> enabled
      </label>
      {number("threshold")}
      {number("quantity")}
      {number("monthly_limit")}
      <button type="submit">Save top-up settings</button>
      {saved && <span> Saved.</span>}
      <Problem message={problem} />
    </form>
  );
}

/** The balance after each entry of the page, oldest first, as a line. */
export function BalanceChart({ entries }: { entries: LedgerEntry[] }) {
  if (entries.length < 2) return null;
  const points = entries.slice().reverse();
  const values = points.map((entry) => entry.balance_after);
  const [low, high] = [Math.min(...values), Math.max(...values)];
  const span = Math.max(high - low, 1);
  const path = points
    .map((entry, at) => `${(at / (points.length - 1)) * 600},${110 - ((entry.balance_after - low) / span) * 100}`)
    .join(" ");
  return (
    <figure>
      <svg viewBox="0 0 600 120" width="600" height="120" role="img" aria-label={`Balance from ${values[0]} to ${values[values.length - 1]}`}>
        <polyline points={path} fill="none" stroke="#0969da" strokeWidth="2" />
      </svg>
      <figcaption>
        Balance over this page of the ledger: {low} to {high} credits
      </figcaption>
    </figure>
  );
}
