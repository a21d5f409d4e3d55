import type { BatonClient } from '../../src/client.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Queue `tasks` on an agent held at max_parallel 0 (8 submitters), then raise its cap to `cap`
 * and time until nothing is queued or running. Used by the worker and push scenarios.
 */
export async function timeDrain(
  api: BatonClient,
  agent: string,
  tasks: number,
  cap: number,
): Promise<{ seconds: number; tasks_per_s: number; failed: number }> {
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < tasks) {
        next++;
        await api.submit(agent, { message: 'bench' });
      }
    }),
  );
  const t0 = performance.now();
  await api.updateAgent(agent, { max_parallel: cap });
  for (;;) {
    const a = await api.getAgent(agent);
    if (a.queued === 0 && a.running === 0) break;
    await sleep(20);
  }
  const seconds = (performance.now() - t0) / 1000;
  const failed = (await api.listExecutions({ agent, status: 'failed,cancelled', limit: 200 })).executions.length;
  return { seconds: Math.round(seconds * 100) / 100, tasks_per_s: Math.round((tasks / seconds) * 10) / 10, failed };
}
