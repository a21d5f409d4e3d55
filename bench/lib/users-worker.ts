/**
 * The worker process of the users' shape (bench/lib/users.ts): one process serving every agent,
 * as a deployment runs it. Started with one JSON argument (WorkerProcessConfig); speaks JSON
 * lines on stdout: {"ready":true} once it is serving, {"start":"<id>","at":"<ns>"} when a task's
 * handler starts (W2; `at` is process.hrtime.bigint() taken as the handler starts: CLOCK_MONOTONIC
 * on Linux, one clock for every process on the machine, so the bench compares it with its own
 * stamp at the submit call), {"done":N} when N tasks were reported (W1), then it stops on SIGTERM
 * or stdin end.
 *
 * Systems:
 * - sdk:     the worker SDK, one createWorker serving all the agents (`agents`);
 * - sdk-per-agent: the SDK, one createWorker per agent (what users wrote before a worker could
 *            serve several agents);
 * - hand:    hand-written loops over the plain routes: per agent, claim up to its cap with a
 *            long-poll, complete each task, claim again;
 * - bullmq:  a BullMQ Worker per queue (W1: one queue, concurrency = agents × cap);
 * - graphile: graphile-worker's runner (W1 only).
 */
import type { Socket } from 'node:net';
import type { Worker } from '../../src/worker/sdk.ts';

// The client and the SDK as an installed package runs them: dist/'s JavaScript, which the bench
// brought up to date before starting the server (bench/lib/server.ts); BENCH_SERVER_TSX=1: src/.
const fromSrc = process.env.BENCH_SERVER_TSX === '1';
const load = (m: string) => import(fromSrc ? `../../src/${m}.ts` : `../../dist/${m}.js`);
const { BatonClient } = (await load('client')) as typeof import('../../src/client.ts');
const { closeConnections, connectionPools, nodeHttpTransport } = (await load('worker/http')) as typeof import('../../src/worker/http.ts');
const { createWorker } = (await load('worker/sdk')) as typeof import('../../src/worker/sdk.ts');

export type WorkerSystem = 'sdk' | 'sdk-per-agent' | 'hand' | 'bullmq' | 'graphile';

export interface WorkerProcessConfig {
  system: WorkerSystem;
  /** W1: report {"done":N} after N tasks; W2: report each start. */
  workload: 'w1' | 'w2';
  tasks: number;
  agents: string[];
  cap: number;
  baton?: { url: string; key: string };
  redis?: { host: string; port: number; prefix: string };
  graphile?: { connectionString: string; schema: string; concurrency: number };
}

const cfg = JSON.parse(process.argv[2]!) as WorkerProcessConfig;
const say = (o: object) => process.stdout.write(`${JSON.stringify(o)}\n`);
let reported = 0;
// TCP connections opened to the server (Baton's systems go through connectionPools).
let connections = 0;
for (const pool of Object.values(connectionPools.http)) {
  // BENCH_USERS_WORKER_POOL=node-default: connections kept as Node's global agent keeps them (idle 5 s, at most 256 idle, no cap), for comparison.
  if (process.env.BENCH_USERS_WORKER_POOL === 'node-default') {
    (pool as unknown as { options: { timeout: number } }).options.timeout = 5_000;
    pool.maxFreeSockets = 256;
    pool.maxSockets = Infinity;
  }
  const connect = pool.createConnection.bind(pool) as (...a: unknown[]) => Socket;
  (pool as unknown as { createConnection: typeof connect }).createConnection = (...a) => {
    connections++;
    return connect(...a);
  };
}
const reportedOne = () => {
  if (++reported === cfg.tasks && cfg.workload === 'w1') say({ done: reported, connections });
};
const started = (id: string) => {
  if (cfg.workload !== 'w2') return;
  const at = process.hrtime.bigint(); // before the line is built and written: the pipe is not the user's latency
  say({ start: id, at: String(at) });
};

const stops: Array<() => Promise<void>> = [];

async function batonSdk(perAgent: boolean): Promise<void> {
  const { url, key } = cfg.baton!;
  const handler = async (t: { executionId: string }) => {
    started(t.executionId);
    return undefined;
  };
  const onEvent = (e: { type: string; reported?: string }) => {
    if (e.type === 'task:end' && e.reported === 'completed') reportedOne();
    else if (e.type === 'error' || e.type === 'transport:error') process.stderr.write(`${JSON.stringify(e)}\n`);
  };
  const workers: Worker[] = perAgent
    ? cfg.agents.map((agent) => createWorker({ server: url, key, agent, concurrency: cfg.cap, handler, onEvent }))
    : [createWorker({ server: url, key, agents: cfg.agents, concurrency: cfg.cap, handler, onEvent })];
  await Promise.all(workers.map((w) => w.start()));
  stops.push(async () => void (await Promise.all(workers.map((w) => w.stop()))));
}

async function batonHand(): Promise<void> {
  const { url, key } = cfg.baton!;
  const client = new BatonClient({ server: url, key, transport: nodeHttpTransport });
  const stop = new AbortController();
  const loop = async (agent: string) => {
    while (!stop.signal.aborted) {
      let tasks;
      try {
        tasks = await client.claim(agent, { worker_id: 'hand', max: cfg.cap, wait_seconds: 20 }, stop.signal);
      } catch (err) {
        if (stop.signal.aborted) return;
        throw err;
      }
      await Promise.all(
        tasks.map(async (t) => {
          started(t.execution_id);
          await client.complete(t.execution_id, { lease_token: t.lease_token, status: 'succeeded' });
          reportedOne();
        }),
      );
    }
  };
  const loops = cfg.agents.map((a) => loop(a).catch((err) => process.stderr.write(`hand loop ${a}: ${err?.stack ?? err}\n`)));
  stops.push(async () => {
    stop.abort();
    await Promise.all(loops);
  });
}

async function bullmq(): Promise<void> {
  const { Worker: BullWorker } = await import('bullmq');
  const { host, port, prefix } = cfg.redis!;
  const queues = cfg.workload === 'w1' ? [cfg.agents[0]!] : cfg.agents;
  const concurrency = cfg.workload === 'w1' ? cfg.agents.length * cfg.cap : 1;
  const workers = queues.map(
    (q) =>
      new BullWorker(
        q,
        async (job) => {
          started(job.id!);
        },
        { connection: { host, port }, prefix, concurrency, autorun: true },
      ),
  );
  for (const w of workers) {
    w.on('completed', reportedOne);
    w.on('error', (err) => process.stderr.write(`bullmq: ${err?.message ?? err}\n`));
  }
  await Promise.all(workers.map((w) => w.waitUntilReady()));
  stops.push(async () => void (await Promise.all(workers.map((w) => w.close()))));
}

async function graphile(): Promise<void> {
  const { run } = await import('graphile-worker');
  const g = cfg.graphile!;
  const runner = await run({
    connectionString: g.connectionString,
    schema: g.schema,
    concurrency: g.concurrency,
    maxPoolSize: g.concurrency + 2,
    pollInterval: 1000,
    noHandleSignals: true,
    crontab: '',
    taskList: { noop: async () => {} },
  });
  runner.events.on('job:success', reportedOne);
  stops.push(() => runner.stop());
}

async function main(): Promise<void> {
  if (cfg.system === 'sdk') await batonSdk(false);
  else if (cfg.system === 'sdk-per-agent') await batonSdk(true);
  else if (cfg.system === 'hand') await batonHand();
  else if (cfg.system === 'bullmq') await bullmq();
  else await graphile();
  say({ ready: true });
}

let stopping = false;
async function shutdown(): Promise<void> {
  if (stopping) return;
  stopping = true;
  await Promise.all(stops.map((s) => s().catch((err) => process.stderr.write(`stop: ${err?.stack ?? err}\n`))));
  closeConnections();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown());
process.stdin.on('end', () => void shutdown());
process.stdin.resume();
main().catch((err) => {
  process.stderr.write(`worker process failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
