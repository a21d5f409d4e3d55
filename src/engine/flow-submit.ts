import { AlreadyRunning } from '../domain/errors.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { appendAudit } from './audit.ts';
import { inIndexOrder } from './candidates.ts';
import { foldDebounced } from './transitions/debounce.ts';
import type { SubmitInput } from './submit-input.ts';
import { LIVE_STATUSES, statusIs } from './status-sql.ts';

/**
 * A keyed submit's debounce and singleton (src/domain/flow.ts), decided under the agent's
 * new-work turn, which every creator of the agent's work takes: of two submits on one key, the
 * second sees what the first wrote. Returns the folded task (debounce), or the input to create
 * from (a debounced one due at the end of its window); throws AlreadyRunning for a singleton
 * whose key has a live task.
 */
export async function keyedSubmit(
  store: Pick<StoreAdapter, 'kind'>,
  tx: Tx,
  agent: string,
  input: SubmitInput,
  now: number,
  actor: string,
): Promise<{ folded: ExecutionRow; input?: undefined } | { folded?: undefined; input: SubmitInput }> {
  const key = input.key;
  if (!key) return { input };
  const window = input.debounce_seconds ?? null;
  if (window !== null) {
    // The key's debounced task still queued and not due: a seek of executions_debounce_open, led
    // by agent, in its order (inIndexOrder: no plan reads the agent's queue by status and sorts).
    const open = await inIndexOrder(store, tx, () =>
      tx
        .selectFrom('executions')
        .select('id')
        .where('agent', '=', agent)
        .where('flow_key', '=', key)
        .where('status', '=', statusIs('queued'))
        .where('debounce_seconds', 'is not', null)
        .where('run_after', '>', now)
        .orderBy('run_after')
        .limit(1)
        .executeTakeFirst(),
    );
    if (open) {
      const payload = input.payloadJson ?? JSON.stringify(input.payload ?? null);
      const folded = await foldDebounced(tx, open.id, { message: input.message, payload, window, now });
      if (folded) {
        await appendAudit(tx, { at: now, actor, action: 'execution.debounced', subject: agent, execution_id: folded.id, detail: { key } });
        return { folded };
      }
    }
  }
  if (input.singleton) {
    const live = await tx
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', agent)
      .where('flow_key', '=', key)
      .where('status', 'in', LIVE_STATUSES)
      .limit(1)
      .executeTakeFirst();
    if (live) throw new AlreadyRunning(`key '${key}' of agent '${agent}'`, live.id);
  }
  return { input: window !== null ? { ...input, run_after: now + window * 1000 } : input };
}
