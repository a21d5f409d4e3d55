/**
 * W2 — wake-up latency on an idle system. Each of `agents` agents (max_parallel 1) has its own
 * claim loop long-polling it with a long wait, as a deployment's workers do. The driver submits
 * one task at a time, round robin over the agents: it waits until that agent's loop has completed
 * its previous task and re-issued its claim, lets it settle (`settleMs`, so the claim is really
 * parked in the server), then takes t0 just before the submit call. Latency is t0 → the moment
 * the claim call returns that task. The first `warmup` iterations are not counted. With one agent
 * only one claim is parked; with 100 (a deployment's shape), the other 99 stay parked
 * while each submit must wake exactly its own agent's claim.
 *
 * With one agent, then the same number of submits back to back to a second agent nobody claims
 * from: the call's round trip when the server and the client are busy rather than woken from idle
 * (an idle machine runs the same submit several times slower: waking an idle process costs
 * more than the submit's own work; docs/benchmarks.md).
 */
import { setMaxListeners } from 'node:events';
import type { Driver } from './drivers.ts';
import { sleep, summarize, type LatencySummary } from './stats.ts';

export interface W2Config {
  submits: number;
  warmup: number;
  settleMs: number;
  /** Agent name, or the prefix of the agents' names when there are several. */
  agent: string;
  /** Agents, each with its own parked claim (default 1). */
  agents?: number;
}

export interface W2Result {
  submits: number;
  /** Agents the submits were spread over, each with its own parked claim. */
  agents: number;
  /** Submit → claim returned the task (the worker starts), ms. */
  wake: LatencySummary;
  /** Submit call round trip alone, ms (for reference). */
  submit_call: LatencySummary;
  /** Submit call round trip, submits back to back (no pause, no claim waiting), ms. One agent only. */
  submit_back_to_back?: LatencySummary;
}

/** One agent's claim loop and its handshake with the driver. */
interface Parked {
  agent: string;
  /** Resolves when the loop's claim for this agent is in flight. */
  parked: Promise<void>;
  /** Resolves with the task the claim returned and when. */
  got: Promise<{ id: string; at: number }>;
  done: Promise<void>;
}

export async function runW2(driver: Driver, cfg: W2Config): Promise<W2Result> {
  const n = cfg.agents ?? 1;
  const names = n === 1 ? [cfg.agent] : Array.from({ length: n }, (_, k) => `${cfg.agent}-${k}`);
  for (const name of names) await driver.createAgent(name, 1, 1000);
  const stop = new AbortController();
  // Every claim loop listens on it (W2×100: 100 listeners, each removed when its claim returns).
  setMaxListeners(0, stop.signal);
  let failure: unknown;
  const fail = (err: unknown) => {
    failure ??= err;
    stop.abort();
  };
  const loops = names.map((name) => claimLoop(driver, name, stop.signal, fail));

  const wake: number[] = [];
  const submitCall: number[] = [];
  try {
    for (let i = 0; i < cfg.warmup + cfg.submits; i++) {
      const loop = loops[i % n]!;
      await Promise.race([loop.parked, loop.done]);
      if (failure) throw failure;
      await sleep(cfg.settleMs);
      const waitFor = loop.got;
      const t0 = performance.now();
      const id = await driver.submit(loop.agent, i);
      const t1 = performance.now();
      const g = await Promise.race([waitFor, loop.done.then(() => undefined)]);
      if (failure || !g) throw failure ?? new Error(`W2: the claim loop of ${loop.agent} stopped`);
      if (g.id !== id) throw new Error(`W2: claimed ${g.id}, expected ${id}`);
      if (i >= cfg.warmup) {
        wake.push(g.at - t0);
        submitCall.push(t1 - t0);
      }
    }
  } finally {
    stop.abort();
    await Promise.all(loops.map((l) => l.done));
  }
  if (failure) throw failure;

  const result: W2Result = { submits: cfg.submits, agents: n, wake: summarize(wake), submit_call: summarize(submitCall) };
  if (n > 1) return result;
  const burstAgent = `${cfg.agent}-b2b`;
  await driver.createAgent(burstAgent, 1, cfg.warmup + cfg.submits);
  const backToBack: number[] = [];
  for (let i = 0; i < cfg.warmup + cfg.submits; i++) {
    const t0 = performance.now();
    await driver.submit(burstAgent, i);
    if (i >= cfg.warmup) backToBack.push(performance.now() - t0);
  }
  return { ...result, submit_back_to_back: summarize(backToBack) };
}

/**
 * Long-polls one agent until `stop`: each task it gets is completed, the claim re-issued (then
 * `parked` is a new promise that resolves as it goes out), and `got` resolves with the task.
 */
function claimLoop(driver: Driver, agent: string, stop: AbortSignal, fail: (err: unknown) => void): Parked {
  let parked!: () => void;
  let got!: (v: { id: string; at: number }) => void;
  const loop: Parked = {
    agent,
    parked: new Promise<void>((r) => (parked = r)),
    got: new Promise((r) => (got = r)),
    done: Promise.resolve(),
  };
  loop.done = (async () => {
    while (!stop.aborted) {
      // A fresh controller per claim (see w1.ts: undici keeps listeners on a long-lived signal).
      const ac = new AbortController();
      const abort = () => ac.abort();
      stop.addEventListener('abort', abort, { once: true });
      const claimP = driver.claim(agent, { owner: 'bench-w2', max: 1, waitMs: 30_000, signal: ac.signal });
      parked();
      let tasks;
      try {
        tasks = await claimP;
      } catch (err) {
        if (stop.aborted) return;
        throw err;
      } finally {
        stop.removeEventListener('abort', abort);
      }
      const at = performance.now();
      if (tasks.length === 0) continue; // the long-poll ran out; claim again
      const t = tasks[0]!;
      await driver.complete(t.id, t.token);
      loop.parked = new Promise<void>((r) => (parked = r));
      const g = got;
      loop.got = new Promise((r) => (got = r));
      g({ id: t.id, at });
    }
  })().catch(fail);
  return loop;
}
