/**
 * The traffic driver: submits tasks through the API, triggers a schedule by hand, delivers
 * webhooks — every request with an Idempotency-Key, retried against the other server with the
 * same key when a server dies under it — and cancels some of what it created.
 */

export interface Target {
  url: string;
  alive(): boolean;
}

export interface TrafficOptions {
  servers: Target[];
  key: string;
  agents: string[];
  scheduleId: string | null;
  webhookPath: string | null;
  tasks: number;
  concurrency: number;
  /** Share of created executions cancelled shortly after (default 0.05). */
  cancelRate: number;
  /** Share of submissions whose key is re-sent to check the replay answers with the same id. */
  replayRate: number;
  random: () => number;
  /** Don't run further ahead of the workers than this many open (queued + running) executions. */
  maxOpen: number;
  openCount: () => number;
  onUnit?: (done: number) => Promise<void> | void;
}

export interface TrafficStats {
  /** Execution ids the deployment acknowledged, by how they were created. */
  acknowledged: Map<string, 'api' | 'schedule' | 'webhook'>;
  /** Idempotency key → every execution id answered for it (more than one is a duplicate). */
  answersByKey: Map<string, Set<string>>;
  /** Each creation acknowledged: when the request that got the answer was sent, and when it was answered (epoch ms). */
  answered: Array<{ sent: number; at: number }>;
  refused: Record<string, number>;
  retriedRequests: number;
  gaveUp: number;
  cancelsRequested: number;
  replaysChecked: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** How long one request keeps trying (servers restarting) before the unit is given up. */
const REQUEST_DEADLINE_MS = 90_000;

export async function drive(o: TrafficOptions): Promise<TrafficStats> {
  const stats: TrafficStats = {
    acknowledged: new Map(),
    answersByKey: new Map(),
    answered: [],
    refused: {},
    retriedRequests: 0,
    gaveUp: 0,
    cancelsRequested: 0,
    replaysChecked: 0,
  };
  let turn = 0;
  const pending: Promise<unknown>[] = [];

  async function send(
    method: string,
    path: string,
    body: unknown,
    idemKey?: string,
  ): Promise<{ status: number; body: any; sent: number } | undefined> {
    const until = Date.now() + REQUEST_DEADLINE_MS;
    for (let attempt = 0; ; attempt++) {
      const live = o.servers.filter((s) => s.alive());
      const s = (live.length ? live : o.servers)[turn++ % (live.length || o.servers.length)]!;
      const sent = Date.now();
      try {
        const headers: Record<string, string> = { authorization: `Bearer ${o.key}` };
        if (body !== undefined) headers['content-type'] = 'application/json';
        if (idemKey) headers['idempotency-key'] = idemKey;
        const r = await fetch(s.url + path, {
          method,
          headers,
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(15_000),
        });
        const text = await r.text();
        // 503: the server is closing or the store is unavailable; 429 rate_limited: come back.
        // 409 idempotency_in_flight: a server died holding this key's claim; it is taken over
        // once the claim lapses, so the same key is retried.
        const retryable =
          r.status === 503 ||
          (r.status === 429 && text.includes('rate_limited')) ||
          (r.status === 409 && text.includes('idempotency_in_flight')) ||
          r.status >= 500;
        if (!retryable) return { status: r.status, body: text ? JSON.parse(text) : null, sent };
      } catch {
        /* connection refused / reset: the server died; try again, same key */
      }
      if (attempt === 0) stats.retriedRequests++;
      if (Date.now() > until) return undefined;
      await sleep(Math.min(1_000, 100 * 2 ** attempt));
    }
  }

  function remember(key: string, id: string, via: 'api' | 'schedule' | 'webhook', sent: number) {
    stats.acknowledged.set(id, via);
    stats.answered.push({ sent, at: Date.now() });
    const set = stats.answersByKey.get(key) ?? new Set<string>();
    set.add(id);
    stats.answersByKey.set(key, set);
    if (o.random() < o.cancelRate) {
      stats.cancelsRequested++;
      pending.push(sleep(o.random() * 100).then(() => send('POST', `/v1/executions/${id}/cancel`, undefined)));
    }
  }

  async function unit(i: number) {
    const r = o.random();
    const key = `chaos-${i}`;
    const agent = o.agents[i % o.agents.length]!;
    let via: 'api' | 'schedule' | 'webhook' = 'api';
    let res: { status: number; body: any; sent: number } | undefined;
    if (r < 0.08 && o.scheduleId) {
      via = 'schedule';
      res = await send('POST', `/v1/schedules/${o.scheduleId}/trigger`, {}, key);
    } else if (r < 0.15 && o.webhookPath) {
      via = 'webhook';
      res = await send('POST', o.webhookPath, { n: i }, key);
    } else {
      res = await send('POST', `/v1/agents/${agent}/executions`, { message: `chaos task ${i}`, payload: { n: i } }, key);
    }
    if (!res) return void stats.gaveUp++;
    const id = res.body?.execution_id;
    if ((res.status === 201 || res.status === 202 || res.status === 200) && typeof id === 'string') {
      remember(key, id, via, res.sent);
      if (via === 'api' && o.random() < o.replayRate) {
        const again = await send('POST', `/v1/agents/${agent}/executions`, { message: `chaos task ${i}`, payload: { n: i } }, key);
        stats.replaysChecked++;
        if (again?.body?.execution_id) stats.answersByKey.get(key)!.add(again.body.execution_id);
      }
    } else {
      const code = res.body?.error ?? `http_${res.status}`;
      stats.refused[code] = (stats.refused[code] ?? 0) + 1;
    }
  }

  let next = 0;
  let done = 0;
  const lanes = Array.from({ length: o.concurrency }, async () => {
    for (;;) {
      const i = next++;
      if (i >= o.tasks) return;
      while (o.openCount() > o.maxOpen) await sleep(50);
      await unit(i);
      done++;
      await o.onUnit?.(done);
    }
  });
  await Promise.all(lanes);
  await Promise.all(pending);
  return stats;
}
