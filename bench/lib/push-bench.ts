/**
 * Push delivery throughput: a push agent whose URL is a local no-op HTTP server (answers
 * `{"status":"succeeded"}` at once), so the figure is Baton's dispatch path: admit, POST with
 * keep-alive, record the answer. Measures; never asserts.
 *
 * Method: the agent starts with max_parallel 0, every task is submitted, then max_parallel is
 * raised (the raise wakes the dispatcher). Time runs from the raise until nothing is queued or running.
 */
import { createServer } from 'node:http';
import { BatonClient } from '../../src/client.ts';
import { timeDrain } from './drain.ts';

export interface PushBenchConfig {
  tasks?: number; // default 2000
  maxParallel?: number; // the agent's cap (default 32)
}

export interface PushBenchResult {
  scenario: 'push_noop_agent';
  tasks: number;
  max_parallel: number;
  seconds: number;
  tasks_per_s: number;
  requests: number;
  failed: number;
}

export async function runPushBench(server: { url: string; key: string }, cfg: PushBenchConfig = {}): Promise<PushBenchResult> {
  const tasks = cfg.tasks ?? 2000;
  const maxParallel = cfg.maxParallel ?? 32;
  let requests = 0;
  const agentServer = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      requests++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"status":"succeeded"}');
    });
  });
  agentServer.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => agentServer.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(agentServer.address() as { port: number }).port}/`;
  const api = new BatonClient({ server: server.url, key: server.key });
  const agent = `pb-${Date.now().toString(36)}`;
  try {
    await api.createAgent({ name: agent, delivery: 'push', push_url: url, max_parallel: 0, max_backlog: tasks });
    const r = await timeDrain(api, agent, tasks, maxParallel);
    return { scenario: 'push_noop_agent', tasks, max_parallel: maxParallel, ...r, requests };
  } finally {
    await api.deleteAgent(agent).catch(() => undefined);
    agentServer.closeAllConnections();
    await new Promise((r) => agentServer.close(r));
  }
}
