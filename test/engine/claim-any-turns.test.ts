/**
 * A look at many agents starts at most LOOK_CHUNK admissions in one turn of the event loop
 * (claim-any.ts): started all at once, 1,000 of them held the loop for their starts and, on
 * SQLite, ran as that turn's one group commit. Counted, not timed: the turn each admission started
 * in (a spy on the engine's admitOnce, turns counted by a setImmediate chain: test/helpers/turns.ts).
 * The agents were never claimed, so their claim stamps are due and no store's empty-looks read
 * (src/engine/empty-looks.ts) leaves any of them out.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { LOOK_CHUNK } from '../../src/engine/claim-any.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';
import { agentMaker } from '../helpers/agents.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';
import { countTurns } from '../helpers/turns.ts';

let ts: TestStore;
let engine: Engine;
const AGENTS = 2 * LOOK_CHUNK + LOOK_CHUNK / 2;

const newAgent = agentMaker(() => engine, 'look-turns', { max_parallel: 3, max_backlog: 100, breaker: null });

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'look-turns', claimPollMs: 600_000 });
});
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

type Admit = (agent: string, opts: unknown) => Promise<ExecutionRow[]>;

/** What `fn` returned, and the agents it admitted for (engine.admitOnce), by the turn each admission started in. */
async function byTurn<T>(fn: () => Promise<T>): Promise<{ out: T; turns: string[][] }> {
  const target = engine as unknown as { admitOnce: Admit };
  const original = target.admitOnce.bind(engine);
  const started = new Map<number, string[]>();
  const counter = countTurns();
  const spy = vi.spyOn(target, 'admitOnce').mockImplementation((agent, opts) => {
    started.set(counter.turns, [...(started.get(counter.turns) ?? []), agent]);
    return original(agent, opts);
  });
  try {
    return { out: await fn(), turns: [...started.values()] };
  } finally {
    counter.stop();
    spy.mockRestore();
  }
}

describe(`a look at many agents, a chunk a turn (${STORE_KIND})`, () => {
  it(`starts at most ${LOOK_CHUNK} admissions in one turn, and every agent's`, async () => {
    const agents: string[] = [];
    for (let i = 0; i < AGENTS; i++) agents.push(await newAgent());
    const items = agents.map((agent) => ({ agent, max: 3 }));
    const { out, turns } = await byTurn(() => engine.claimAny(items, { owner: 'w', waitMs: 0 }));
    expect(out).toEqual([]);
    expect(turns.flat().sort()).toEqual([...agents].sort());
    expect(turns.map((t) => t.length)).toEqual([LOOK_CHUNK, LOOK_CHUNK, LOOK_CHUNK / 2]);
  });

  it('answers with the work of an agent in its last chunk', async () => {
    const agents: string[] = [];
    for (let i = 0; i < AGENTS; i++) agents.push(await newAgent());
    const made = await engine.submit(agents.at(-1)!, { message: 'late in the look' }, 'test');
    const { out, turns } = await byTurn(() =>
      engine.claimAny(
        agents.map((agent) => ({ agent, max: 3 })),
        { owner: 'w', waitMs: 0 },
      ),
    );
    expect(out.map((r) => r.id)).toEqual([made.id]);
    expect(Math.max(...turns.map((t) => t.length))).toBeLessThanOrEqual(LOOK_CHUNK);
  });
});
