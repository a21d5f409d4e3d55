import { Unauthorized } from '../domain/errors.ts';
import type { Tx } from '../store/adapter.ts';
import { preparedQuery } from '../store/prepared-query.ts';

/**
 * A claim made with an API key takes work only while that key is live and, for a key scoped to an
 * agent, for that agent. The revocation reaches a parked claim as a signal (src/api/revocation.ts),
 * but a process that has not heard it yet may be admitting already: reading the key's row in the
 * admission itself (after its candidates, so no task queued after the revocation goes with it)
 * makes the answer exact across processes. An agent deleted revokes its keys in its deleting
 * transaction, so a key that is live names the agent row it was made for, not one created later
 * under the same name. PostgreSQL's claim function reads the same fact.
 */
export async function requireLiveKey(tx: Tx, keyId: string, agent: string): Promise<void> {
  const [live] = await liveKey(tx, { keyId, agent });
  if (!live) throw new Unauthorized('the API key that made this claim was revoked');
}

/** requireLiveKey's statement, built once (preparedQuery): every claim made with a key runs it. */
const liveKey = preparedQuery((tx: Tx, p: { keyId: string; agent: string }) =>
  tx
    .selectFrom('api_keys')
    .select('id')
    .where('id', '=', p.keyId)
    .where('revoked_at', 'is', null)
    .where((eb) => eb.or([eb('agent', 'is', null), eb('agent', '=', p.agent)])),
);
