/**
 * The two ways the workloads reach Baton, behind one small interface:
 * - http:   BatonClient (src/client.ts) against a running server — the real worker protocol;
 * - inproc: the Engine API in this process (engine.submit / claim / complete) — what an
 *           embedded user gets.
 */
import { BatonClient } from '../../src/client.ts';
import { closeConnections, connectionPools, nodeHttpTransport } from '../../src/worker/http.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';

export interface Claimed {
  id: string;
  token: string;
}

export interface Driver {
  mode: 'http' | 'inproc';
  createAgent(name: string, maxParallel: number, maxBacklog: number): Promise<void>;
  /** Returns the execution id. */
  submit(agent: string, i: number): Promise<string>;
  claim(agent: string, o: { owner: string; max: number; waitMs: number; signal?: AbortSignal }): Promise<Claimed[]>;
  complete(id: string, token: string): Promise<void>;
  /** Batch submit: tasks `is` to one agent in one call. Absent: the driver has none. */
  submitMany?(agent: string, is: number[]): Promise<void>;
  /** Complete and claim the agent's next tasks in one call. Absent: the driver has none. */
  completeAndClaim?(id: string, token: string, o: { owner: string; max: number }): Promise<Claimed[]>;
  close(): Promise<void>;
}

export function httpDriver(url: string, key: string): Driver {
  boundClientConnections(CLIENT_CONNECTIONS);
  const client = new BatonClient({ server: url, key, transport: nodeHttpTransport });
  return {
    mode: 'http',
    async createAgent(name, maxParallel, maxBacklog) {
      await client.createAgent({ name, max_parallel: maxParallel, max_backlog: maxBacklog });
    },
    async submit(agent, i) {
      return (await client.submit(agent, { message: 'noop', payload: { i } })).execution_id;
    },
    async claim(agent, o) {
      const tasks = await client.claim(agent, { worker_id: o.owner, max: o.max, wait_seconds: o.waitMs / 1000 }, o.signal);
      return tasks.map((t) => ({ id: t.execution_id, token: t.lease_token }));
    },
    async complete(id, token) {
      await client.complete(id, { lease_token: token, status: 'succeeded' });
    },
    async submitMany(agent, is) {
      const r = await client.submitMany(
        agent,
        is.map((i) => ({ message: 'noop', payload: { i } })),
      );
      if (r.created !== is.length)
        throw new Error(`batch submit created ${r.created} of ${is.length}: ${JSON.stringify(r.items.find((x) => 'error' in x))}`);
    },
    async completeAndClaim(id, token, o) {
      const r = await client.complete(id, { lease_token: token, status: 'succeeded', claim: { worker_id: o.owner, max: o.max } });
      return (r.tasks ?? []).map((t) => ({ id: t.execution_id, token: t.lease_token }));
    },
    close: closeClientConnections,
  };
}

/**
 * Connections the load generator may hold open to one server for its requests other than claims
 * (connectionPools in src/worker/http.ts, as the SDK's; claims have their own pool, one per claim
 * loop). `baton up` closes any beyond 256 from one address at once (src/api/connections.ts):
 * with ~180 requests in flight (W1 over HTTP: 50 claim loops × 3 tasks and 32 submitters) fetch,
 * which the driver used before, kept up to 256 sockets open and then had one cut mid-request
 * ("other side closed"). This many (raised from the pool's own 64 so W1 runs as it ran before),
 * plus the 50 claims, stays under that; beyond it, requests wait for a free connection.
 */
const CLIENT_CONNECTIONS = 200;

function boundClientConnections(connections: number): void {
  connectionPools.http.quick.maxSockets = connections;
}

/**
 * Drop this process's pooled HTTP connections (the agent keeps them alive), as a client process
 * that exits would. Without it a connection the pool opened but never used keeps `baton up` from
 * exiting on SIGTERM (see the note in bench/lib/server.ts).
 */
async function closeClientConnections(): Promise<void> {
  closeConnections();
}

export function engineDriver(store: StoreAdapter, engineOpts: { claimPollMs?: number } = {}): Driver & { engine: Engine } {
  const engine = new Engine({ store, nodeId: 'bench', ...engineOpts });
  return {
    mode: 'inproc',
    engine,
    async createAgent(name, maxParallel, maxBacklog) {
      await engine.agents.create({ name, max_parallel: maxParallel, max_backlog: maxBacklog }, 'bench');
    },
    async submit(agent, i) {
      return (await engine.submit(agent, { message: 'noop', payload: { i } }, 'bench')).id;
    },
    async claim(agent, o) {
      const rows = await engine.claim(agent, { owner: o.owner, max: o.max, waitMs: o.waitMs, signal: o.signal });
      return rows.map((r) => ({ id: r.id, token: r.lease_token! }));
    },
    async complete(id, token) {
      await engine.complete(id, token, { status: 'succeeded' }, 'bench');
    },
    async submitMany(agent, is) {
      const out = await engine.submitMany(
        agent,
        is.map((i) => ({ message: 'noop', payload: { i } })),
        'bench',
      );
      const bad = out.find((o) => o.kind !== 'created');
      if (bad) throw new Error(`batch submit: ${JSON.stringify(bad)}`);
    },
    async close() {
      engine.close();
    },
  };
}
