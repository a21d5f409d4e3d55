import type { AlertSinkKind } from '../domain/canary.ts';
import type { Reaped } from '../domain/outcomes.ts';
import { announce } from './announce.ts';
import type { EngineContext } from './context.ts';
import type { EngineEvents } from './events.ts';
import { expireOnce } from './transitions/expire.ts';

/** What a reaper pass needs of the engine: its context, settings, and events to tell what it reaped. */
export interface ReapContext extends EngineContext {
  readonly nodeId: string;
  readonly cancelGraceMs: number;
  readonly backlogExpiryMs: number;
  readonly reapBatch: number;
  readonly alertSinks: readonly AlertSinkKind[];
  readonly events: EngineEvents;
}

/**
 * One reaper pass: re-queue or park lapsed leases, fail timed-out and stale-queued rows,
 * force overdue cancellations. Safe to run in every process at once.
 */
export async function reapOnce(engine: ReapContext): Promise<Reaped[]> {
  const all: Reaped[] = [];
  for (;;) {
    const now = engine.now();
    const actor = `reaper:${engine.nodeId}`;
    const { batch, followed } = await engine.store.transaction(async (tx) => {
      const { reaped, finals } = await expireOnce(tx, engine.store, {
        now,
        actor,
        cancelGraceMs: engine.cancelGraceMs,
        backlogExpiryMs: engine.backlogExpiryMs,
        batch: engine.reapBatch,
        alertSinks: engine.alertSinks,
      });
      return { batch: reaped, followed: await engine.follow(tx, now, actor, finals) };
    });
    all.push(...batch);
    announce(engine.store, [...batch.map((r) => ({ id: r.id, agent: r.agent, status: r.to })), ...followed.created, ...followed.ended]);
    if (batch.length < engine.reapBatch) break;
  }
  if (all.length > 0) engine.events.emit('reaper:reaped', all);
  return all;
}
