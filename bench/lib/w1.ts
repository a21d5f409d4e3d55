/**
 * W1 — throughput. N no-op tasks spread round-robin over A agents (each max_parallel P,
 * max_backlog ≥ N), submitted by a driver with C submits in flight while L claim loops in the
 * same process claim and complete them. Measured from just before the first submit to the
 * moment the last completion returned.
 *
 * Claim loops: loop k serves agents k, k+L, k+2L, … (100 agents / 50 loops = 2 each), round
 * robin. Each claim asks for up to `claimMax` tasks without waiting (wait 0); the loop completes
 * what it got (concurrently), then moves to its next agent. Only when a whole round over its
 * agents came back empty does it long-poll the next one (idleWaitMs), so an idle loop does not
 * spin. When the last task completes, waiting claims are aborted.
 *
 * Fewer round trips, both off by default so figures stay comparable with earlier runs:
 * - submitBatch B > 1: the submitters send batches of up to B tasks of one agent (the batch
 *   route over HTTP, engine.submitMany in-process), the batches taken round robin over the
 *   agents, so arrival stays spread;
 * - completeClaim: each completion also claims one task of its agent (the slot it frees), and
 *   the loop runs that task next; the loop claims on its own only when a completion brought none.
 */
import type { Driver } from './drivers.ts';
import { round } from './stats.ts';

export interface W1Config {
  tasks: number;
  agents: number;
  maxParallel: number;
  loops: number;
  claimMax: number;
  submitConcurrency: number;
  idleWaitMs: number;
  agentPrefix: string;
  /** Tasks per submit request (1: the single submit route). Default 1. */
  submitBatch?: number;
  /** Complete and claim the next task in one request. Default false. */
  completeClaim?: boolean;
}

export interface W1Result {
  tasks: number;
  seconds: number;
  tasks_per_s: number;
  submit_seconds: number;
  submits_per_s: number;
  /** From the last submit returning to the last completion. */
  drain_after_last_submit_ms: number;
  claims: number;
  empty_claims: number;
  tasks_per_claim: number;
  /** Tasks that came with a completion (completeClaim). */
  tasks_via_completion: number;
  /** HTTP requests (or engine calls) the run made: submits, claims, completions. */
  requests: number;
  max_outstanding: number;
  /** Rate over consecutive fifths of the run (by completion count), tasks/s: shows warm-up or slow-down. */
  completion_rate_by_fifth: number[];
}

export async function setupAgents(
  driver: Driver,
  cfg: Pick<W1Config, 'agents' | 'maxParallel' | 'agentPrefix'>,
  maxBacklog: number,
): Promise<string[]> {
  const names = Array.from({ length: cfg.agents }, (_, i) => `${cfg.agentPrefix}${String(i).padStart(3, '0')}`);
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < names.length) await driver.createAgent(names[next++]!, cfg.maxParallel, maxBacklog);
    }),
  );
  return names;
}

export async function runW1(driver: Driver, cfg: W1Config, agents: string[]): Promise<W1Result> {
  const N = cfg.tasks;
  const stop = new AbortController();
  let failure: unknown;
  const fail = (err: unknown) => {
    failure ??= err;
    stop.abort();
  };

  let submitted = 0;
  let completed = 0;
  let claims = 0;
  let emptyClaims = 0;
  let claimedTasks = 0;
  let viaCompletion = 0;
  let requests = 0;
  const completeClaim = cfg.completeClaim === true && driver.completeAndClaim !== undefined;
  const submitBatch = driver.submitMany ? Math.max(1, cfg.submitBatch ?? 1) : 1;
  let maxOutstanding = 0;
  const completionTimes: number[] = new Array(N);
  let tLastSubmit = 0;
  let tLastComplete = 0;
  let resolveDone!: () => void;
  const allDone = new Promise<void>((r) => (resolveDone = r));

  const inFlight = new Set<AbortController>();
  stop.signal.addEventListener('abort', () => {
    for (const ac of inFlight) ac.abort();
  });
  const loopAgents = (k: number) => agents.filter((_, i) => i % cfg.loops === k);

  async function claimLoop(k: number): Promise<void> {
    const mine = loopAgents(k);
    if (mine.length === 0) return;
    const owner = `bench-loop-${k}`;
    let idx = 0;
    let emptyStreak = 0;
    while (!stop.signal.aborted) {
      const agent = mine[idx++ % mine.length]!;
      const waitMs = emptyStreak >= mine.length ? cfg.idleWaitMs : 0;
      // One controller per claim, aborted at the end: undici's fetch keeps an abort listener on
      // the signal it is given until the request is garbage-collected, so one long-lived signal
      // shared by thousands of claims piles up listeners (and slows every later request).
      const ac = new AbortController();
      inFlight.add(ac);
      let tasks;
      try {
        tasks = await driver.claim(agent, { owner, max: cfg.claimMax, waitMs, signal: ac.signal });
      } catch (err) {
        if (stop.signal.aborted) return;
        throw err;
      } finally {
        inFlight.delete(ac);
      }
      claims++;
      requests++;
      if (tasks.length === 0) {
        emptyClaims++;
        emptyStreak++;
        continue;
      }
      emptyStreak = 0;
      claimedTasks += tasks.length;
      await Promise.all(
        tasks.map(async (first) => {
          // With completeClaim a slot runs the tasks its completions bring until one brings none.
          for (let t: (typeof tasks)[number] | undefined = first; t;) {
            let next: typeof tasks = [];
            if (completeClaim && !stop.signal.aborted) next = await driver.completeAndClaim!(t.id, t.token, { owner, max: 1 });
            else await driver.complete(t.id, t.token);
            requests++;
            viaCompletion += next.length;
            const now = performance.now();
            completionTimes[completed] = now;
            completed++;
            if (completed === N) {
              tLastComplete = now;
              resolveDone();
              stop.abort();
            }
            t = next[0];
          }
        }),
      );
    }
  }

  // Batches of up to submitBatch tasks of one agent, taken round robin over the agents (task i
  // goes to agent i % A, as with single submits).
  const batches: Array<{ agent: string; is: number[] }> = [];
  if (submitBatch > 1) {
    const perAgent = agents.map(() => [] as number[]);
    for (let i = 0; i < N; i++) perAgent[i % agents.length]!.push(i);
    for (let off = 0; off < Math.ceil(N / agents.length); off += submitBatch) {
      perAgent.forEach((is, a) => {
        const part = is.slice(off, off + submitBatch);
        if (part.length > 0) batches.push({ agent: agents[a]!, is: part });
      });
    }
  }
  let nextSubmit = 0;
  async function submitter(): Promise<void> {
    while (nextSubmit < (submitBatch > 1 ? batches.length : N) && !stop.signal.aborted) {
      const k = nextSubmit++;
      let count = 1;
      if (submitBatch > 1) {
        const b = batches[k]!;
        await driver.submitMany!(b.agent, b.is);
        count = b.is.length;
      } else {
        await driver.submit(agents[k % agents.length]!, k);
      }
      requests++;
      submitted += count;
      const outstanding = submitted - completed;
      if (outstanding > maxOutstanding) maxOutstanding = outstanding;
      if (submitted === N) tLastSubmit = performance.now();
    }
  }

  const tStart = performance.now();
  const loops = Array.from({ length: cfg.loops }, (_, k) => claimLoop(k).catch(fail));
  const submitters = Array.from({ length: cfg.submitConcurrency }, () => submitter().catch(fail));
  await Promise.race([allDone, new Promise<void>((r) => stop.signal.addEventListener('abort', () => r(), { once: true }))]);
  await Promise.all([...loops, ...submitters]);
  if (failure) throw failure;
  if (completed !== N) throw new Error(`W1 stopped with ${completed}/${N} completed`);

  const seconds = (tLastComplete - tStart) / 1000;
  const submitSeconds = (tLastSubmit - tStart) / 1000;
  const fifths: number[] = [];
  for (let f = 0; f < 5; f++) {
    const a = Math.floor((f * N) / 5);
    const b = Math.floor(((f + 1) * N) / 5) - 1;
    const t0 = a === 0 ? tStart : completionTimes[a - 1]!;
    fifths.push(round((b - a + 1) / ((completionTimes[b]! - t0) / 1000), 0));
  }
  return {
    tasks: N,
    seconds: round(seconds, 3),
    tasks_per_s: round(N / seconds, 0),
    submit_seconds: round(submitSeconds, 3),
    submits_per_s: round(N / submitSeconds, 0),
    drain_after_last_submit_ms: round(tLastComplete - tLastSubmit, 1),
    claims,
    empty_claims: emptyClaims,
    tasks_per_claim: round(claimedTasks / Math.max(1, claims - emptyClaims), 2),
    tasks_via_completion: viaCompletion,
    requests,
    max_outstanding: maxOutstanding,
    completion_rate_by_fifth: fifths,
  };
}
