/**
 * The chaos run's failing-agent phase (the circuit breaker): one agent's every task fails
 * (its command exits 1, as when an API key has expired). Its breaker must open after K failures
 * in a row and its backlog must survive, still queued, instead of being burnt through; the tasks
 * it holds back are then cancelled by deleting the agent, so the run ends with nothing queued.
 */
import type { StoreAdapter } from '../src/store/adapter.ts';
import { sigkill, workerProc, type Proc } from './cluster.ts';

export interface FailingAgentResult {
  /** Tasks submitted to the failing agent. */
  submitted: number;
  /** The breaker's K (failures in a row that open it). */
  consecutive: number;
  /** The breaker's state when the phase looked, and how many tasks had failed / were still queued. */
  state: string;
  failed: number;
  queued: number;
}

export interface FailingAgentOptions {
  store: StoreAdapter;
  admin: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>;
  server: () => string;
  key: string;
  leaseTtl: number;
  procs: Proc[];
  log: (line: string) => void;
}

const AGENT = 'chaos-failing';
const TASKS = 20;
const CONSECUTIVE = 3;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function failingAgentPhase(o: FailingAgentOptions): Promise<FailingAgentResult> {
  // One seat and one worker: failures come one after another, so exactly K run before it opens.
  const created = await o.admin('POST', '/v1/agents', {
    name: AGENT,
    max_parallel: 1,
    max_backlog: 100,
    lease_ttl_seconds: o.leaseTtl,
    breaker: { consecutive: CONSECUTIVE, ratio: 1, window: 20, cooldown_ms: 600_000, max_cooldown_ms: 600_000, count: ['agent_error'] },
  });
  if (created.status !== 201) throw new Error(`create agent ${AGENT}: ${created.status} ${JSON.stringify(created.body)}`);
  for (let i = 0; i < TASKS; i++) {
    const r = await o.admin('POST', `/v1/agents/${AGENT}/executions`, { message: `failing task ${i}` });
    if (r.status !== 201 && r.status !== 202) throw new Error(`submit to ${AGENT}: ${r.status} ${JSON.stringify(r.body)}`);
  }
  const failing = workerProc('failing1', AGENT, o.server, o.key, 1, ['/bin/sh', '-c', 'cat >/dev/null; exit 1']);
  o.procs.push(failing);
  await failing.start();

  const look = async () => {
    const agent = await o.admin('GET', `/v1/agents/${AGENT}`);
    const counts = await o.store.db
      .selectFrom('executions')
      .select(['status', (eb) => eb.fn.countAll<number>().as('n')])
      .where('agent', '=', AGENT)
      .groupBy('status')
      .execute()
      .catch(() => []);
    const n = (s: string) => Number(counts.find((c) => c.status === s)?.n ?? 0);
    return { state: String(agent.body?.breaker?.state ?? 'unknown'), failed: n('failed'), queued: n('queued') };
  };
  let seen = await look();
  for (let i = 0; i < 240 && seen.state !== 'open'; i++) {
    await sleep(250);
    seen = await look();
  }
  // A little longer: an open breaker must stay shut while the worker keeps asking.
  await sleep(3_000);
  seen = await look();
  o.log(`failing agent: breaker ${seen.state} after ${seen.failed} failures; ${seen.queued} of ${TASKS} still queued`);

  sigkill(failing);
  const deleted = await o.admin('DELETE', `/v1/agents/${AGENT}`);
  if (deleted.status !== 200) o.log(`failing agent: DELETE answered ${deleted.status}`);
  return { submitted: TASKS, consecutive: CONSECUTIVE, ...seen };
}
