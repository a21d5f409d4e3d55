/**
 * W2 — wake-up latency on an idle system. One claim loop long-polls one agent (max_parallel 1)
 * with a long wait. The driver submits one task at a time: it waits until the loop has
 * completed the previous task and re-issued its claim, lets it settle (`settleMs`, so the claim
 * is really parked in the server), then takes t0 just before the submit call. Latency is t0 →
 * the moment the claim call returns that task. The first `warmup` iterations are not counted.
 *
 * Then the same number of submits back to back to a second agent nobody claims from: the call's
 * round trip when the server and the client are busy rather than woken from idle (an idle
 * machine runs the same submit 2–4× slower; docs/benchmarks.md, "Where issue #12's targets stand").
 */
import type { Driver } from './drivers.ts';
import { sleep, summarize, type LatencySummary } from './stats.ts';

export interface W2Config {
  submits: number;
  warmup: number;
  settleMs: number;
  agent: string;
}

export interface W2Result {
  submits: number;
  /** Submit → claim returned the task (the worker starts), ms. */
  wake: LatencySummary;
  /** Submit call round trip alone, ms (for reference). */
  submit_call: LatencySummary;
  /** Submit call round trip, submits back to back (no pause, no claim waiting), ms. */
  submit_back_to_back: LatencySummary;
}

export async function runW2(driver: Driver, cfg: W2Config): Promise<W2Result> {
  await driver.createAgent(cfg.agent, 1, 1000);
  const stop = new AbortController();
  // Handshake between the worker loop and the driver.
  let parked: () => void = () => {};
  let parkedP = new Promise<void>((r) => (parked = r));
  let got: (v: { id: string; at: number }) => void = () => {};
  let gotP = new Promise<{ id: string; at: number }>((r) => (got = r));
  let failure: unknown;
  let current: AbortController | undefined;
  stop.signal.addEventListener('abort', () => current?.abort());

  const worker = (async () => {
    while (!stop.signal.aborted) {
      // A fresh controller per claim (see w1.ts: undici keeps listeners on a long-lived signal).
      const ac = new AbortController();
      current = ac;
      const claimP = driver.claim(cfg.agent, { owner: 'bench-w2', max: 1, waitMs: 30_000, signal: ac.signal });
      parked();
      let tasks;
      try {
        tasks = await claimP;
      } catch (err) {
        if (stop.signal.aborted) return;
        throw err;
      }
      const at = performance.now();
      if (tasks.length === 0) continue; // the long-poll ran out; claim again
      const t = tasks[0]!;
      await driver.complete(t.id, t.token);
      parkedP = new Promise<void>((r) => (parked = r));
      const g = got;
      gotP = new Promise((r) => (got = r));
      g({ id: t.id, at });
    }
  })().catch((err) => {
    failure = err;
    got({ id: '', at: NaN });
  });

  const wake: number[] = [];
  const submitCall: number[] = [];
  try {
    for (let i = 0; i < cfg.warmup + cfg.submits; i++) {
      await parkedP;
      await sleep(cfg.settleMs);
      const waitFor = gotP;
      const t0 = performance.now();
      const id = await driver.submit(cfg.agent, i);
      const t1 = performance.now();
      const g = await waitFor;
      if (failure) throw failure;
      if (g.id !== id) throw new Error(`W2: claimed ${g.id}, expected ${id}`);
      if (i >= cfg.warmup) {
        wake.push(g.at - t0);
        submitCall.push(t1 - t0);
      }
    }
  } finally {
    stop.abort();
    await worker;
  }
  if (failure) throw failure;

  const burstAgent = `${cfg.agent}-b2b`;
  await driver.createAgent(burstAgent, 1, cfg.warmup + cfg.submits);
  const backToBack: number[] = [];
  for (let i = 0; i < cfg.warmup + cfg.submits; i++) {
    const t0 = performance.now();
    await driver.submit(burstAgent, i);
    if (i >= cfg.warmup) backToBack.push(performance.now() - t0);
  }
  return { submits: cfg.submits, wake: summarize(wake), submit_call: summarize(submitCall), submit_back_to_back: summarize(backToBack) };
}
