import { NotFound } from '../domain/errors.ts';
import type { WaitingView } from '../domain/admission.ts';
import type { ExecutionRow } from '../store/schema.ts';
import type { EngineContext } from './context.ts';
import { waitingFor } from './waiting.ts';

/** What reading an execution needs of the engine: its context and how long a queued task may wait. */
type DetailContext = EngineContext & { readonly backlogExpiryMs: number };

/** An execution with its events, its retry chain, why it waits (queued) and what its final outcome started; NotFound when absent. */
export async function readExecutionDetail(engine: DetailContext, id: string) {
  const execution = await engine.store.db.selectFrom('executions').selectAll().where('id', '=', id).executeTakeFirst();
  if (!execution) throw new NotFound('execution', id);
  const events = await engine.store.db.selectFrom('execution_events').selectAll().where('execution_id', '=', id).orderBy('id').execute();
  // The retry chain, from any member: its first run and every retry of it.
  const root = execution.retry_root ?? execution.id;
  const chain = await engine.store.db
    .selectFrom('executions')
    .select('id')
    .where((eb) => eb.or([eb('id', '=', root), eb('retry_root', '=', root)]))
    .orderBy('retry_number')
    .execute();
  // What its final outcome started through subscriptions (chain_links: primary key seek on source_id).
  const started = await engine.store.db
    .selectFrom('chain_links')
    .select(['subscription_id', 'execution_id', 'refused', 'at'])
    .where('source_id', '=', id)
    .orderBy('subscription_id')
    .execute();
  return { execution, events, chain: chain.map((c) => c.id), waiting: await waiting(engine, execution), started };
}

/** Why a queued execution is not running (null when it is not queued): see waiting.ts. */
async function waiting(engine: DetailContext, execution: ExecutionRow): Promise<WaitingView | null> {
  if (execution.status !== 'queued') return null;
  const agent = await engine.store.db.selectFrom('agents').selectAll().where('name', '=', execution.agent).executeTakeFirst();
  return waitingFor(engine.store.db, execution, agent, engine.now(), engine.backlogExpiryMs, engine.store.kind);
}
