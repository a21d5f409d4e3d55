/**
 * A long-poll claim parked with a key that is then revoked (or whose agent is deleted) ends with
 * 401 and is handed nothing: a task submitted afterwards stays queued for a worker with a valid key.
 * A real `baton up` on each store; on PostgreSQL also a second server that learns of the revocation.
 */
import { describe, expect, it } from 'vitest';
import { BatonClient } from '../../src/client.ts';
import type { BatonNode } from '../../src/server/up.ts';
import { startTestNode, testNodeHooks } from '../helpers/delivery.ts';
import { STORE_KIND, type TestStore } from '../helpers/store.ts';

let ts: TestStore;
let node: BatonNode;
let api: BatonClient;

testNodeHooks((t) => ({ ts, node, api } = t));

/** A claim that waits up to 20 s, as `agentKey`; resolves with its status and body. */
async function parkClaim(agent: string, agentKey: string, url = node.url): Promise<{ status: number; body: string }> {
  const r = await fetch(`${url}/v1/agents/${agent}/claim`, {
    method: 'POST',
    headers: { authorization: `Bearer ${agentKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ wait_seconds: 20, worker_id: 'parked' }),
  });
  return { status: r.status, body: await r.text() };
}

/** Give the claim time to reach the server and park. */
const parked = () => new Promise((r) => setTimeout(r, 300));

describe(`a parked claim and its key (${STORE_KIND})`, () => {
  it('ends with 401 when its key is revoked, and the task submitted afterwards goes to a valid worker', async () => {
    await api.createAgent({ name: 'rv' });
    const { key: agentKey, id } = await api.createKey({ name: 'rv-worker', scope: 'agent', agent: 'rv' });
    const claim = parkClaim('rv', agentKey);
    await parked();
    await api.revokeKey(id);
    const { execution_id } = await api.submit('rv', { message: 'after the revocation' });
    const answer = await claim;
    expect(answer.status, answer.body).toBe(401);
    expect(answer.body).not.toContain('after the revocation');
    expect((await api.getExecution(execution_id)).status).toBe('queued');
    const [task] = await api.claim('rv', { worker_id: 'valid' });
    expect(task?.execution_id).toBe(execution_id);
  });

  it('ends with 401 when its agent is deleted, and never serves the agent created again under the same name', async () => {
    await api.createAgent({ name: 'rv-gone' });
    const { key: agentKey } = await api.createKey({ name: 'rv-gone-worker', scope: 'agent', agent: 'rv-gone' });
    const claim = parkClaim('rv-gone', agentKey);
    await parked();
    await api.deleteAgent('rv-gone');
    await api.createAgent({ name: 'rv-gone' });
    const { execution_id } = await api.submit('rv-gone', { message: 'for the new agent' });
    const answer = await claim;
    expect(answer.status, answer.body).toBe(401);
    expect(answer.body).not.toContain('for the new agent');
    expect((await api.getExecution(execution_id)).status).toBe('queued');
  });

  it.runIf(STORE_KIND === 'postgres')('ends with 401 when another server revokes its key', async () => {
    const other = await startTestNode(ts, { dispatcher: false });
    try {
      await api.createAgent({ name: 'rv-far' });
      const { key: agentKey, id } = await api.createKey({ name: 'rv-far-worker', scope: 'agent', agent: 'rv-far' });
      const claim = parkClaim('rv-far', agentKey, other.node.url);
      await parked();
      await api.revokeKey(id);
      const { execution_id } = await api.submit('rv-far', { message: 'revoked elsewhere' });
      const answer = await claim;
      expect(answer.status, answer.body).toBe(401);
      expect((await api.getExecution(execution_id)).status).toBe('queued');
    } finally {
      await other.node.stop();
    }
  });
});
