/**
 * A claim made with an API key takes nothing once the key is revoked, on both stores, whether or
 * not its process heard the revocation: the engine here never hears it (only the API's routes
 * listen for the `key` signal), as a server on PostgreSQL that has not yet heard it from another
 * process. Both admission paths: the one-statement claim (PostgreSQL, an agent with no limits) and
 * the transaction (every store; an agent with a throttle on PostgreSQL).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyStore } from '../../src/auth/keys.ts';
import { Engine } from '../../src/engine/engine.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let engine: Engine;
let keys: KeyStore;
let n = 0;
const name = (p: string) => `${p}-${++n}`;

beforeAll(async () => {
  ts = await openTestStore();
  engine = new Engine({ store: ts.store, nodeId: 'claim-key-test', claimPollMs: 600_000 });
  keys = new KeyStore(ts.store);
});
afterAll(async () => {
  engine?.close();
  await ts?.cleanup();
});

const status = async (id: string) => (await engine.executionHead(id))?.status;
const unauthorized = { code: 'unauthorized' };

describe.each([
  ['no limits (the one-statement claim on PostgreSQL)', {}],
  ['a throttle (the admission transaction)', { throttle: { limit: 1000, period_seconds: 1, burst: 0 } }],
])(`a claim and its key (${STORE_KIND}), agent with %s`, (_, limits) => {
  it('takes work with its live key, and none once the key is revoked, though nobody told this process', async () => {
    const agent = name('ck');
    await engine.agents.create({ name: agent, max_parallel: 5, ...limits }, 'test');
    const { row: key } = await keys.create({ name: `${agent}-worker`, scope: 'agent', agent }, 'test');
    const first = await engine.submit(agent, { message: 'before' }, 'key:test');
    expect((await engine.claim(agent, { owner: 'w', max: 1, keyId: key.id })).map((r) => r.id)).toEqual([first.id]);
    await keys.revoke(key.id, 'test');
    const after = await engine.submit(agent, { message: 'after the revocation' }, 'key:test');
    await expect(engine.claim(agent, { owner: 'w', max: 1, keyId: key.id })).rejects.toMatchObject(unauthorized);
    expect(await status(after.id)).toBe('queued');
    // An admin key (no agent) still claims it.
    const { row: admin } = await keys.create({ name: `${agent}-admin`, scope: 'admin' }, 'test');
    expect((await engine.claim(agent, { owner: 'w', max: 1, keyId: admin.id })).map((r) => r.id)).toEqual([after.id]);
  });

  it('a parked claim whose key is revoked unheard ends Unauthorized when work arrives, and takes none', async () => {
    const agent = name('ckp');
    await engine.agents.create({ name: agent, max_parallel: 5, ...limits }, 'test');
    const { row: key } = await keys.create({ name: `${agent}-worker`, scope: 'agent', agent }, 'test');
    const parked = engine.claim(agent, { owner: 'w', max: 1, waitMs: 600_000, keyId: key.id });
    await keys.revoke(key.id, 'test');
    // The submit's signal wakes the parked claim; its admission reads the key.
    const task = await engine.submit(agent, { message: 'after the revocation' }, 'key:test');
    await expect(parked).rejects.toMatchObject(unauthorized);
    expect(await status(task.id)).toBe('queued');
  });

  it('a key of an agent deleted is not served by the agent created again under its name, nor is a key of another agent', async () => {
    const agent = name('ckd');
    await engine.agents.create({ name: agent, max_parallel: 5, ...limits }, 'test');
    const { row: old } = await keys.create({ name: `${agent}-worker`, scope: 'agent', agent }, 'test');
    await engine.agents.delete(agent, 'test');
    await engine.agents.create({ name: agent, max_parallel: 5, ...limits }, 'test');
    const other = name('ck-other');
    await engine.agents.create({ name: other }, 'test');
    const { row: otherKey } = await keys.create({ name: `${other}-worker`, scope: 'agent', agent: other }, 'test');
    const task = await engine.submit(agent, { message: 'for the new agent' }, 'key:test');
    await expect(engine.claim(agent, { owner: 'w', max: 1, keyId: old.id })).rejects.toMatchObject(unauthorized);
    await expect(engine.claim(agent, { owner: 'w', max: 1, keyId: otherKey.id })).rejects.toMatchObject(unauthorized);
    expect(await status(task.id)).toBe('queued');
  });
});

describe(`the one-statement claim and its key (${STORE_KIND})`, () => {
  it.runIf(STORE_KIND === 'postgres')(
    'decides a claim with a live key, and leaves one with a revoked key undecided, writing nothing',
    async () => {
      const fast = ts.store.fastPaths!;
      const agent = name('ckf');
      await engine.agents.create({ name: agent, max_parallel: 5 }, 'test');
      const { row: key } = await keys.create({ name: `${agent}-worker`, scope: 'agent', agent }, 'test');
      const task = await engine.submit(agent, { message: 'one' }, 'key:test');
      const claim = { id: agent, delivery: 'pull', owner: 'w', max: 1, now: engine.now(), keyId: key.id } as const;
      await keys.revoke(key.id, 'test');
      expect((await fast.claimMany([claim])).has(agent)).toBe(false);
      expect(await status(task.id)).toBe('queued');
      const { row: live } = await keys.create({ name: `${agent}-worker-2`, scope: 'agent', agent }, 'test');
      expect((await fast.claimMany([{ ...claim, keyId: live.id }])).get(agent)?.map((r) => r.id)).toEqual([task.id]);
    },
  );
});
