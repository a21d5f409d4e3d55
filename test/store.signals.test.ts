/**
 * Signals between processes on PostgreSQL (LISTEN/NOTIFY): a deployment in its own schema hears
 * its own processes and never another deployment's in the same database. (SQLite's signals stay
 * in the process; the engine tests cover them.)
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { channelName, openPostgres } from '../src/store/postgres.ts';
import type { StoreAdapter } from '../src/store/adapter.ts';
import { describeMultiProcess, openTestStore, PG_URL, untilHearing, type TestStore } from './helpers/store.ts';

describeMultiProcess('signals on PostgreSQL', () => {
  let mine: TestStore;
  let other: TestStore;
  let twin: StoreAdapter;

  beforeAll(async () => {
    mine = await openTestStore();
    other = await openTestStore();
    // A second process of `mine`'s deployment: same database, same schema, its own connections.
    twin = openPostgres({ url: PG_URL, schema: mine.location.schema, poolMax: 1 });
  });
  afterAll(async () => {
    await twin?.close();
    await mine?.cleanup();
    await other?.cleanup();
  });

  it("hears its own deployment's processes, never another schema's", async () => {
    const heard: string[] = [];
    const off = mine.store.subscribe('agent', (message) => void heard.push(message));
    // LISTEN is issued when the first listener subscribes: wait until it hears its twin.
    await untilHearing(mine.store, twin);
    other.store.publish('agent', 'from-another-deployment');
    twin.publish('agent', 'from-my-twin');
    await expect.poll(() => heard, { timeout: 10_000 }).toContain('from-my-twin');
    await new Promise((r) => setTimeout(r, 300)); // whatever else was coming has come
    expect(heard).not.toContain('from-another-deployment');
    off();
  });

  it('names channels per schema, within PostgreSQL’s 63-byte identifiers', () => {
    expect(channelName(undefined, 'execution')).toBe('baton_execution');
    expect(channelName('tenant_a', 'execution')).toBe('baton_tenant_a_execution');
    const long = channelName('s'.repeat(63), 'execution');
    expect(Buffer.byteLength(long)).toBeLessThanOrEqual(63);
    expect(long).not.toBe(channelName('s'.repeat(62) + 't', 'execution'));
  });
});
