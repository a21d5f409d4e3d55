/**
 * Webhooks a real sender can rely on: Standard Webhooks signatures with a timestamp tolerance
 * (a captured delivery cannot be replayed later), the sender's delivery id as the idempotency key
 * (a provider's "redeliver" starts no second run, nor does a replay with a fresh Idempotency-Key
 * header once the id is signed), refusals audited as counts rather than a row
 * each, and the overlap policy that actually governs shown on webhooks aimed at schedules.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BatonClient } from '../../src/client.ts';
import { sign, signStandard } from '../../src/engine/triggers/webhooks.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { startTestNode } from '../helpers/delivery.ts';
import { openTestStore, STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let node: BatonNode;
let api: BatonClient;

beforeAll(async () => {
  ts = await openTestStore();
  ({ node, api } = await startTestNode(ts, { dispatcher: false }));
  await api.createAgent({ name: 'hooked', max_backlog: 1000 });
});
afterAll(async () => {
  await node?.stop();
  await ts?.cleanup();
});

const deliver = (path: string, body: string, headers: Record<string, string>) =>
  fetch(node.url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
const runsOf = async (webhookId: string) =>
  (await ts.store.db.selectFrom('executions').select('id').where('webhook_id', '=', webhookId).execute()).length;

describe(`webhook senders (${STORE_KIND})`, () => {
  it('accepts Standard Webhooks signatures, refuses a stale timestamp or a tampered body, and dedupes by webhook-id', async () => {
    const hook = await api.createWebhook({ name: 'std', agent: 'hooked', generate_secret: true } as never);
    const secret = hook.secret!;
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    const body = '{"event":"deploy"}';
    const now = Math.floor(Date.now() / 1000);
    const headers = (id: string, ts: number, b = body) => ({
      'webhook-id': id,
      'webhook-timestamp': String(ts),
      'webhook-signature': `v1,bogus ${signStandard(secret, id, ts, b)}`,
    });

    const first = await deliver(hook.path, body, headers('msg_1', now));
    expect(first.status).toBe(202);
    const firstBody = await first.json();
    // The sender retries (same id, same body, a fresh timestamp): the first answer, no second run.
    const again = await deliver(hook.path, body, headers('msg_1', now + 5));
    expect(again.status).toBe(202);
    expect(await again.json()).toEqual(firstBody);
    expect(await runsOf(hook.id)).toBe(1);
    // A replay inside the window with a fresh, unsigned Idempotency-Key: the signed webhook-id
    // is the key, so still the first answer and no second run.
    for (const fresh of ['replay-1', 'replay-2']) {
      const replay = await deliver(hook.path, body, { ...headers('msg_1', now), 'idempotency-key': fresh });
      expect(replay.status).toBe(202);
      expect(await replay.json()).toEqual(firstBody);
      expect(replay.headers.get('idempotent-replay')).toBe('true');
    }
    expect(await runsOf(hook.id)).toBe(1);

    // A captured delivery replayed later than the tolerance: refused.
    const stale = await deliver(hook.path, body, headers('msg_2', now - 3600));
    expect(stale.status).toBe(401);
    expect((await stale.json()).message).toMatch(/webhook-timestamp/);
    // The signature covers the body.
    const tampered = await deliver(hook.path, '{"event":"other"}', headers('msg_3', now));
    expect(tampered.status).toBe(401);
    expect(await runsOf(hook.id)).toBe(1);
    // A webhook-id that cannot be a key is refused naming that header.
    const long = 'm'.repeat(300);
    const badId = await deliver(hook.path, body, headers(long, now));
    expect(badId.status).toBe(400);
    expect((await badId.json()).message).toBe('header webhook-id: must be 1-255 visible ASCII characters');
  });

  it('uses X-GitHub-Delivery as the idempotency key: a redelivery is the first answer', async () => {
    const hook = await api.createWebhook({ name: 'gh', agent: 'hooked', generate_secret: true } as never);
    const body = '{"ref":"main"}';
    const headers = { 'x-hub-signature-256': sign(hook.secret!, body), 'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958' };
    const a = await deliver(hook.path, body, headers);
    const b = await deliver(hook.path, body, headers);
    expect(a.status).toBe(202);
    expect(await b.json()).toEqual(await a.json());
    expect(b.headers.get('idempotent-replay')).toBe('true');
    // With the GitHub signature verified, the delivery id wins over an Idempotency-Key header.
    const c = await deliver(hook.path, body, { ...headers, 'idempotency-key': 'fresh-key' });
    expect(c.headers.get('idempotent-replay')).toBe('true');
    expect(await runsOf(hook.id)).toBe(1);
    const other = await deliver(hook.path, body, { ...headers, 'x-github-delivery': 'another-delivery' });
    expect(other.status).toBe(202);
    expect(await runsOf(hook.id)).toBe(2);
    const bad = await deliver(hook.path, body, { ...headers, 'x-github-delivery': 'd'.repeat(300) });
    expect(bad.status).toBe(400);
    expect((await bad.json()).message).toBe('header X-GitHub-Delivery: must be 1-255 visible ASCII characters');
  });

  it('audits refused deliveries as counts per webhook and minute, not a row each', async () => {
    const hook = await api.createWebhook({ name: 'noisy', agent: 'hooked', generate_secret: true } as never);
    const before = await ts.store.db
      .selectFrom('audit_log')
      .select('id')
      .where('action', '=', 'webhook.refused')
      .where('subject', '=', hook.id)
      .execute();
    expect(before).toHaveLength(0);
    const answers = await Promise.all(
      Array.from({ length: 30 }, () => deliver(hook.path, '{}', { 'x-baton-signature': 'sha256=' + '0'.repeat(64) })),
    );
    expect(answers.every((r) => r.status === 401)).toBe(true);
    await node.stop(); // writes the counts still held in memory
    const rows = await ts.store.db
      .selectFrom('audit_log')
      .select(['detail'])
      .where('action', '=', 'webhook.refused')
      .where('subject', '=', hook.id)
      .execute();
    expect(rows.length).toBeGreaterThanOrEqual(1);
    expect(rows.length).toBeLessThanOrEqual(2); // the 30 may straddle a minute boundary
    expect(rows.reduce((n, r) => n + JSON.parse(r.detail!).count, 0)).toBe(30);
    ({ node, api } = await startTestNode(ts, { dispatcher: false }));
  });

  it("shows a schedule's overlap policy on a webhook aimed at it", async () => {
    const s = await api.createSchedule('hooked', { name: 'nightly', cron: '0 2 * * *', message: 'm', overlap_policy: 'skip' } as never);
    const hook = await api.createWebhook({ name: 'to-schedule', schedule_id: s.id } as never);
    expect(hook.overlap_policy).toBe('skip');
    expect((await api.listWebhooks('hooked')).find((w) => w.id === hook.id)!.overlap_policy).toBe('skip');
  });
});
