/**
 * Flow control in the chaos load: chaos-a caps each key (one key with a bigger override) and both
 * traffic agents draw from one pool with seats and a throttle; chaos-b has a throttle of its own.
 * The limits are set and the keyed tasks submitted from the harness on the store (the API does
 * not take keys or pools yet), while servers and workers are killed around them. The final
 * canary cycle's F-01 and F-02 must find nothing.
 */
import { Engine } from '../src/engine/engine.ts';
import type { StoreAdapter } from '../src/store/adapter.ts';

export const CHAOS_POOL = 'chaos-pool';
const KEYS = ['tenant-0', 'tenant-1', 'tenant-2', 'tenant-3'];

export interface FlowLoad {
  /** Ids of the keyed tasks the harness submitted (debounced submits folded into one id). */
  ids: Set<string>;
  submitted: number;
  debounced: number;
  stop(): Promise<void>;
}

export async function setupFlow(store: StoreAdapter): Promise<void> {
  const engine = new Engine({ store, nodeId: 'chaos-flow' });
  try {
    await engine.pools.create({ name: CHAOS_POOL, max_parallel: 5, throttle: { limit: 40, period_seconds: 1, burst: 5 } }, 'chaos');
    await engine.agents.update('chaos-a', { key_max_parallel: 1, key_overrides: { 'tenant-0': 2 }, pools: [CHAOS_POOL] }, 'chaos');
    await engine.agents.update('chaos-b', { throttle: { limit: 20, period_seconds: 1, burst: 3 }, pools: [CHAOS_POOL] }, 'chaos');
  } finally {
    engine.close();
  }
}

/** Keyed submits to chaos-a every `everyMs` until stopped (every tenth debounced on one key). */
export function startKeyedLoad(store: StoreAdapter, everyMs: number, max: number): FlowLoad {
  const engine = new Engine({ store, nodeId: 'chaos-flow' });
  const load: FlowLoad = { ids: new Set(), submitted: 0, debounced: 0, stop: async () => {} };
  let running = true;
  const loop = (async () => {
    for (let i = 0; running && i < max; i++) {
      const debounce = i % 10 === 9;
      try {
        const row = await engine.submit(
          'chaos-a',
          debounce
            ? { message: `debounced ${i}`, key: 'tenant-d', debounce_seconds: 5 }
            : { message: `keyed ${i}`, key: KEYS[i % KEYS.length]! },
          'chaos',
        );
        load.ids.add(row.id);
        load.submitted++;
        if (debounce) load.debounced++;
      } catch {
        // PostgreSQL busy or restarting: the next submit tries again.
      }
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  load.stop = async () => {
    running = false;
    await loop;
    engine.close();
  };
  return load;
}
