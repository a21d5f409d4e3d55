import type { AlertSinkKind } from '../domain/canary.ts';
import type { Executor } from './transitions/stamp.ts';

/**
 * Queue an alert for every configured sink as canary_alerts rows, in the caller's transaction, so
 * the event and its alert commit together; the canary's delivery loop sends them, with retries.
 * `invariant` names what alerted (BREAKER_ALERT, BUDGET_ALERT, CHAIN_ALERT, GROUP_JOIN_ALERT);
 * `body` gives what one sink receives. One statement for all sinks; none when no sink is set.
 */
export async function queueAlerts(
  tx: Executor,
  sinks: readonly AlertSinkKind[],
  alert: { invariant: string; transition: 'violated' | 'resolved'; now: number; body: (sink: AlertSinkKind) => Record<string, unknown> },
): Promise<void> {
  if (sinks.length === 0) return;
  await tx
    .insertInto('canary_alerts')
    .values(
      sinks.map((sink) => ({
        invariant: alert.invariant,
        transition: alert.transition,
        sink,
        body: JSON.stringify(alert.body(sink)),
        status: 'pending' as const,
        next_attempt_at: alert.now,
        created_at: alert.now,
      })),
    )
    .execute();
}
