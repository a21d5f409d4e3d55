import type { Tx } from '../../store/adapter.ts';
import { appendAudit } from '../audit.ts';
import { refreshFastPathFacts } from '../fast-path-facts.ts';

/** What ended a lapse hold: a worker claimed, a worker heartbeat, or a push agent's hold timed out. */
export type LapseHoldEnd = 'claim' | 'heartbeat' | 'timeout';

/**
 * Set (or widen) an agent's shared-cause lapse hold, in the reaper's transaction. A hold already
 * set keeps its first `since` and adds the new lapses to its count: one outage, one hold.
 */
export async function setLapseHold(tx: Tx, agent: string, ids: string[], now: number, actor: string): Promise<void> {
  const before = await tx.selectFrom('agents').select(['lapse_hold_at', 'lapse_hold_count']).where('name', '=', agent).executeTakeFirst();
  if (!before) return; // deleted meanwhile: its work is being cancelled
  await tx
    .updateTable('agents')
    .set({ lapse_hold_at: before.lapse_hold_at ?? now, lapse_hold_count: Number(before.lapse_hold_count ?? 0) + ids.length })
    .where('name', '=', agent)
    .execute();
  await refreshFastPathFacts(tx, agent);
  await appendAudit(tx, { at: now, actor, action: 'agent.lapse_hold', subject: agent, detail: { lapsed: ids.length, execution_ids: ids } });
}

/**
 * End an agent's lapse hold, if it has one, with its audit row. The update is guarded by the
 * `since` it read, so of two processes ending the same hold only one writes (and audits) it.
 * Returns whether this call ended it.
 */
export async function clearLapseHold(tx: Tx, agent: string, now: number, actor: string, by: LapseHoldEnd): Promise<boolean> {
  const before = await tx
    .selectFrom('agents')
    .select(['lapse_hold_at', 'lapse_hold_count'])
    .where('name', '=', agent)
    .where('lapse_hold_at', 'is not', null)
    .executeTakeFirst();
  if (!before) return false;
  const done = await tx
    .updateTable('agents')
    .set({ lapse_hold_at: null, lapse_hold_count: null })
    .where('name', '=', agent)
    .where('lapse_hold_at', '=', before.lapse_hold_at)
    .executeTakeFirst();
  if (Number(done.numUpdatedRows) !== 1) return false; // another process ended it first
  await refreshFastPathFacts(tx, agent);
  await appendAudit(tx, {
    at: now,
    actor,
    action: 'agent.lapse_hold_cleared',
    subject: agent,
    detail: { by, lapsed: before.lapse_hold_count, held_ms: now - Number(before.lapse_hold_at) },
  });
  return true;
}
