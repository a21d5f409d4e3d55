import type { AlertSinkKind, ViolationTransition } from '../domain/canary.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import { diagnose, invariantMeta } from './catalogue.ts';

/**
 * Alert sinks, configured by the environment (never stored: a sink URL is itself a secret):
 *   webhook — BATON_ALERT_WEBHOOK_URL, generic JSON: POST {event, invariant, severity, …}
 *   slack   — BATON_ALERT_SLACK_URL, Slack-compatible incoming webhook: POST {text}
 */
export interface AlertSink {
  kind: AlertSinkKind;
  url: string;
}

/** The sinks of the configured URLs (src/config.ts reads and validates them). */
export function alertSinks(urls: { alertWebhookUrl?: string; alertSlackUrl?: string }): AlertSink[] {
  const out: AlertSink[] = [];
  if (urls.alertWebhookUrl) out.push({ kind: 'webhook', url: urls.alertWebhookUrl });
  if (urls.alertSlackUrl) out.push({ kind: 'slack', url: urls.alertSlackUrl });
  return out;
}

export const ALERT_DELIVERY = Object.freeze({
  /** Attempts before an alert is marked `failed` (visible in GET /v1/canary and /metrics). */
  maxAttempts: 6,
  /** First retry after this long, doubling each time (±20 % jitter), capped at `maxBackoffMs`. */
  firstBackoffMs: 5_000,
  maxBackoffMs: 5 * 60_000,
  /** A sink that has not answered within this long counts as a failed attempt. */
  timeoutMs: 5_000,
  /** While one process sends an alert, others leave it alone this long. */
  claimMs: 30_000,
});

export interface Transition {
  invariant: string;
  transition: ViolationTransition;
  /** Open subjects after the cycle (ids only), their count and reason codes. */
  subjects: string[];
  count: number;
  reasons: string[];
  at: number;
}

/** The body one sink receives. Ids, reason codes and diagnoses only. */
export function alertBody(sink: AlertSink['kind'], t: Transition): Record<string, unknown> {
  const meta = invariantMeta(t.invariant);
  const diagnosis = t.reasons.length ? diagnose(t.invariant, t.reasons[0]!) : (meta?.holds ?? t.invariant);
  if (sink === 'slack') {
    const head =
      t.transition === 'violated'
        ? `:red_circle: Baton canary: ${t.invariant} violated (${t.count} open, ${meta?.severity ?? 'critical'})`
        : `:large_green_circle: Baton canary: ${t.invariant} resolved`;
    const tail =
      t.transition === 'violated' ? `\n${diagnosis}\nsubjects: ${t.subjects.slice(0, 10).join(', ')}${t.count > 10 ? ' …' : ''}` : '';
    return { text: head + tail };
  }
  return {
    event: `canary.${t.transition}`,
    invariant: t.invariant,
    tier: meta?.tier ?? null,
    severity: meta?.severity ?? null,
    holds: meta?.holds ?? null,
    diagnosis: t.transition === 'violated' ? diagnosis : null,
    reasons: t.reasons,
    open_count: t.count,
    subjects: t.subjects.slice(0, 20),
    at: new Date(t.at).toISOString(),
  };
}

/** Queue one alert per configured sink, inside the transaction that recorded the transition. */
export async function enqueueAlerts(tx: Tx, sinks: AlertSink[], t: Transition): Promise<void> {
  for (const sink of sinks) {
    await tx
      .insertInto('canary_alerts')
      .values({
        invariant: t.invariant,
        transition: t.transition,
        sink: sink.kind,
        body: JSON.stringify(alertBody(sink.kind, t)),
        status: 'pending',
        next_attempt_at: t.at,
        created_at: t.at,
      })
      .execute();
  }
}

export function backoffMs(attempts: number): number {
  const base = Math.min(ALERT_DELIVERY.maxBackoffMs, ALERT_DELIVERY.firstBackoffMs * 2 ** Math.max(0, attempts - 1));
  return Math.round(base * (0.8 + Math.random() * 0.4));
}

export interface DeliveryOutcome {
  id: number;
  sink: string;
  result: 'delivered' | 'retry' | 'failed';
  error?: string;
}

/**
 * Send pending alerts whose time has come. Each is claimed by a compare-and-set on
 * next_attempt_at first, so processes sharing a database never send the same attempt twice.
 */
export async function deliverAlertsOnce(
  store: StoreAdapter,
  sinks: AlertSink[],
  clock: () => number = () => store.now(),
): Promise<DeliveryOutcome[]> {
  const now = clock();
  const due = await store.db
    .selectFrom('canary_alerts')
    .select(['id', 'sink', 'body', 'attempts', 'next_attempt_at'])
    .where('status', '=', 'pending')
    .where('next_attempt_at', '<=', now)
    .orderBy('id')
    .limit(20)
    .execute();
  const out: DeliveryOutcome[] = [];
  for (const a of due) {
    const claimed = await store.db
      .updateTable('canary_alerts')
      .set({ next_attempt_at: now + ALERT_DELIVERY.claimMs })
      .where('id', '=', a.id)
      .where('status', '=', 'pending')
      .where('next_attempt_at', '=', a.next_attempt_at)
      .executeTakeFirst();
    if (Number(claimed.numUpdatedRows) !== 1) continue;
    const sink = sinks.find((s) => s.kind === a.sink);
    const error = sink ? await post(sink.url, a.body) : 'sink_not_configured';
    const attempts = Number(a.attempts) + 1;
    const at = clock();
    if (!error) {
      await store.db
        .updateTable('canary_alerts')
        .set({ status: 'delivered', attempts, delivered_at: at, last_error: null })
        .where('id', '=', a.id)
        .execute();
      out.push({ id: Number(a.id), sink: a.sink, result: 'delivered' });
    } else {
      const give_up = attempts >= ALERT_DELIVERY.maxAttempts || !sink;
      await store.db
        .updateTable('canary_alerts')
        .set({
          status: give_up ? 'failed' : 'pending',
          attempts,
          last_error: error,
          next_attempt_at: give_up ? at : at + backoffMs(attempts),
        })
        .where('id', '=', a.id)
        .execute();
      out.push({ id: Number(a.id), sink: a.sink, result: give_up ? 'failed' : 'retry', error });
    }
  }
  return out;
}

/** undefined on a 2xx; otherwise a short error code (never the URL, which may hold a token). */
async function post(url: string, body: string): Promise<string | undefined> {
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
      signal: AbortSignal.timeout(ALERT_DELIVERY.timeoutMs),
    });
    await res.arrayBuffer().catch(() => undefined);
    return res.ok ? undefined : `http_${res.status}`;
  } catch (err: any) {
    return err?.name === 'TimeoutError' ? 'timeout' : 'unreachable';
  }
}
