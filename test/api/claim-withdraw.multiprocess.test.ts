/**
 * A withdrawal of a claim on several agents (POST /v1/claim/withdraw) reaches the claim in another
 * `baton up` process of the same PostgreSQL schema, as behind a balancer: two real server
 * processes, the claim waiting in one, its withdrawal sent to the other. The claim waits 60 s;
 * the withdrawal is sent again every 200 ms (it may overtake the claim, as the SDK's retries
 * allow) for at most 40 s, so without the withdrawal crossing processes the claim does not answer
 * in that time. Another key's withdrawal of the same claim id does not end it. A widening
 * (POST /v1/claim/widen) is not passed on: sent to the other process, it does not take.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BatonClient } from '../../src/client.ts';
import { freePort, startBatonUp, stopChild, type Child } from '../helpers/process.ts';
import { describeMultiProcess, openTestStore, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
const children: Child[] = [];

beforeAll(async () => {
  ts = await openTestStore();
});
afterAll(async () => {
  for (const c of children) await stopChild(c);
  await ts?.cleanup();
});

describeMultiProcess('withdrawing a claim that waits in another server process (PostgreSQL)', () => {
  it('ends its wait: it answers at once, as a wait that ran out', async () => {
    const env = { BATON_DATABASE_URL: ts.location.databaseUrl!, BATON_PG_SCHEMA: ts.location.schema!, BATON_DATA_DIR: ts.location.dataDir };
    const one = await startBatonUp(env, await freePort());
    children.push(one);
    const two = await startBatonUp(env, await freePort());
    children.push(two);
    const key = readFileSync(join(ts.location.dataDir, 'admin.key'), 'utf8').trim();
    const atOne = new BatonClient({ server: one.url, key });
    const atTwo = new BatonClient({ server: two.url, key });
    await atOne.createAgent({ name: 'wd-a', max_parallel: 1, max_backlog: 10 });
    await atOne.createAgent({ name: 'wd-b', max_parallel: 1, max_backlog: 10 });
    await atOne.createAgent({ name: 'wd-c', max_parallel: 1, max_backlog: 10 });
    const other = await atOne.createKey({ name: 'another admin', scope: 'admin' });
    const atTwoOtherKey = new BatonClient({ server: two.url, key: other.key });

    const claimId = 'claim\nwith a newline\tand a tab'; // any text: it never breaks a signal's message
    const start = Date.now();
    let answered: unknown;
    const claim = atOne
      .claimAny({ agents: [{ agent: 'wd-a' }, { agent: 'wd-b' }], wait_seconds: 60, claim_id: claimId })
      .then((tasks) => (answered = tasks));
    // Another key's withdrawals of the same id, sent while the claim waits, do not reach it.
    for (let i = 0; i < 10; i++) {
      expect(await atTwoOtherKey.withdrawClaim(claimId)).toEqual({ withdrawn: false });
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(answered).toBeUndefined();
    // A widening takes only in the process the claim waits in: it is not passed on (the SDK then withdraws).
    expect(await atTwo.widenClaim(claimId, [{ agent: 'wd-c' }])).toEqual({ widened: false });
    expect(await atOne.widenClaim(claimId, [{ agent: 'wd-c' }])).toEqual({ widened: true });
    while (answered === undefined && Date.now() - start < 40_000) {
      // Not waiting in this process: `withdrawn: false`, and passed on to the one it waits in.
      expect(await atTwo.withdrawClaim(claimId)).toEqual({ withdrawn: false });
      await new Promise((r) => setTimeout(r, 200));
    }
    await Promise.race([claim, new Promise((r) => setTimeout(r, 1_000))]);
    expect(answered).toEqual([]);
    expect(Date.now() - start).toBeLessThan(50_000);
  }, 120_000);
});
