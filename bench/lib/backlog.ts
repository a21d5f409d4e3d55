/**
 * Deep backlogs: what a submit, one agent's view and the agents list cost while one agent has
 * 0, 10,000, 100,000 and 300,000 executions queued (max_backlog allows 1,000,000), in process on
 * a fresh database. Without the backlog counters each of these
 * would count the queued rows. The standard is history's: the same cost at any
 * depth, within 1.5× of the empty queue.
 */
import { Engine } from '../../src/engine/engine.ts';
import type { StoreKind } from '../../src/store/adapter.ts';
import { freshDb } from './stores.ts';

export const BACKLOG_DEPTHS = [0, 10_000, 100_000, 300_000] as const;
export const BACKLOG_RATIO_TARGET = 1.5;

export interface BacklogProbe {
  depth: number;
  /** p50 ms of 100 plain submits to the deep agent; its max. */
  submit_p50_ms: number;
  submit_max_ms: number;
  /** p50 ms of 50 reads of the deep agent (its live counts) and of 20 agents lists. */
  get_agent_p50_ms: number;
  list_agents_p50_ms: number;
}

export interface BacklogResult {
  probes: BacklogProbe[];
  fill_per_s: number;
}

const FILL_BATCH = 1000;

export async function runBacklogBench(store: StoreKind, pgUrl: string): Promise<BacklogResult> {
  const db = freshDb(store, pgUrl, 'backlog');
  const s = await db.open();
  const engine = new Engine({ store: s, nodeId: 'bench-backlog' });
  try {
    await engine.agents.create({ name: 'deep', max_parallel: 1, max_backlog: 1_000_000 }, 'bench');
    for (let i = 0; i < 99; i++) await engine.agents.create({ name: `other-${i}`, max_parallel: 1 }, 'bench');
    const probes: BacklogProbe[] = [];
    let queued = 0;
    let fillMs = 0;
    let filled = 0;
    for (const depth of BACKLOG_DEPTHS) {
      const t0 = performance.now();
      while (queued < depth) {
        const n = Math.min(FILL_BATCH, depth - queued);
        await engine.submitMany(
          'deep',
          Array.from({ length: n }, (_, k) => ({ message: 'queued', payload: { i: queued + k } })),
          'bench',
        );
        queued += n;
        filled += n;
      }
      fillMs += performance.now() - t0;
      const submits = await timed(100, () => engine.submit('deep', { message: 'probe' }, 'bench'));
      queued += 100;
      const gets = await timed(50, () => engine.agents.get('deep'));
      const lists = await timed(20, () => engine.agents.list({ limit: 200 }));
      probes.push({
        depth,
        submit_p50_ms: p50(submits),
        submit_max_ms: round(Math.max(...submits)),
        get_agent_p50_ms: p50(gets),
        list_agents_p50_ms: p50(lists),
      });
    }
    return { probes, fill_per_s: Math.round(filled / (fillMs / 1000)) };
  } finally {
    engine.close();
    await s.close();
    await db.cleanup();
  }
}

async function timed(n: number, fn: () => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    out.push(performance.now() - t);
  }
  return out;
}

const round = (ms: number) => Math.round(ms * 100) / 100;
const p50 = (xs: number[]) => round([...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!);
