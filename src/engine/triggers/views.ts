import type { ScheduleRow, WebhookRow } from '../../store/schema.ts';
import { iso, preview } from '../views.ts';
import type { ScheduleListRow } from './schedules.ts';
import type { WebhookListRow } from './webhooks.ts';
import { compileCron, nextRuns } from './cron.ts';

const json = (text: string | null) => (text === null ? null : JSON.parse(text));

/** How many upcoming due times a schedule's view lists. */
export const NEXT_RUNS_SHOWN = 5;

export function scheduleView(s: ScheduleRow) {
  return { ...scheduleFields(s), message: s.message, payload: json(s.payload), next_runs: upcoming(s).map((t) => iso(t)!) };
}

/**
 * The next due times: the stored next one, then the ones croner finds after it. Only for a single
 * schedule: compiling a rare expression (the fifth Monday of February) and looking ahead costs
 * milliseconds when it is not cached, so a list page of such schedules, each carrying them, would
 * hold the event loop for a second or more.
 */
function upcoming(s: ScheduleRow): number[] {
  if (s.enabled === 1 && s.next_run_at !== null) {
    try {
      const c = compileCron(s.cron, s.timezone);
      return [s.next_run_at, ...nextRuns(c, s.next_run_at, NEXT_RUNS_SHOWN - 1)];
    } catch {
      return [];
    }
  }
  return [];
}

/** What a schedule's view and its list item share. */
function scheduleFields(s: Omit<ScheduleRow, 'payload' | 'message'>) {
  return {
    id: s.id,
    agent: s.agent,
    name: s.name,
    cron: s.cron,
    timezone: s.timezone,
    enabled: s.enabled === 1,
    overlap_policy: s.overlap_policy,
    misfire_policy: s.misfire_policy,
    misfire_grace_seconds: s.misfire_grace_seconds,
    retry_policy: json(s.retry_policy),
    priority: s.priority,
    next_run_at: iso(s.next_run_at),
    last_run_at: iso(s.last_run_at),
    created_at: iso(s.created_at)!,
    updated_at: iso(s.updated_at)!,
  };
}

/** A schedule in a list: scheduleView with the message and payload as previews of their heads. */
export function scheduleListView(s: ScheduleListRow) {
  return { ...scheduleFields(s), message: preview(s.message_head)!, payload_preview: preview(s.payload_head) };
}

/** `overlapPolicy`: the policy that governs deliveries (a target schedule's, when there is one). */
export function webhookView(w: Omit<WebhookRow, 'token_hash'>, overlapPolicy: string = w.overlap_policy) {
  return {
    id: w.id,
    name: w.name,
    agent: w.agent,
    schedule_id: w.schedule_id,
    message: w.message,
    overlap_policy: overlapPolicy as WebhookRow['overlap_policy'],
    enabled: w.enabled === 1,
    signed: w.secret_enc !== null,
    created_at: iso(w.created_at)!,
    last_delivery_at: iso(w.last_delivery_at),
  };
}

/** A webhook in a list: its message as a preview (GET /v1/webhooks/{id} has it whole). */
export function webhookListView(w: WebhookListRow, overlapPolicy?: string) {
  return { ...webhookView({ ...w, message: '' }, overlapPolicy), message: preview(w.message_head)! };
}
