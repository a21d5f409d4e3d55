/**
 * How every MCP tool answers: structured results with the same JSON as text, refusals that are
 * answers, failures in words, and the execution shapes the execution and schedule tools share.
 */
import { z } from 'zod';
import { ApiError, type BatonClient, type Execution, type ExecutionListItem } from '../client.ts';
import { PREVIEW_CHARS } from '../domain/lists.ts';
import { ExecutionStatus } from '../api/schemas.ts';
import { ownTurn } from './pacing.ts';

/** How long run_task / trigger_schedule may hold a tool call open; MCP clients time out near 60 s. */
export const MAX_WAIT_SECONDS = 55;
export const ExecutionId = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be an execution id');

const ErrorShape = z.object({ code: z.string().nullable(), message: z.string().nullable() }).nullable();
const Summary = z.object({
  id: z.string(),
  agent: z.string(),
  status: ExecutionStatus,
  attempt: z.number(),
  trigger: z.string(),
  schedule_id: z.string().nullable(),
  message: z.string(),
  created_at: z.string(),
  started_at: z.string().nullable(),
  completed_at: z.string().nullable(),
  duration_ms: z.number().nullable(),
  error: ErrorShape,
  retry_of: z.string().nullable(),
});
export const Outcome = Summary.extend({ result: z.unknown(), usage: z.unknown() });
/** A list_executions item: the summary with previews of the payload and result (get_execution has them in full). */
export const ListItem = Summary.extend({
  payload_preview: z
    .string()
    .nullable()
    .describe(`the payload's JSON text, its first ${PREVIEW_CHARS} characters ('…' after them when cut)`),
  result_preview: z.string().nullable().describe(`the result's JSON text, its first ${PREVIEW_CHARS} characters ('…' after them when cut)`),
});
export const NotAvailable = { available: z.boolean().describe('false: this server has no such route') };

const summary = (e: Execution | ExecutionListItem) => ({
  id: e.id,
  agent: e.agent,
  status: e.status,
  attempt: e.attempt,
  trigger: e.trigger,
  schedule_id: e.schedule_id,
  message: e.message.length > 500 ? e.message.slice(0, 500) + '…' : e.message,
  created_at: e.created_at,
  started_at: e.started_at,
  completed_at: e.completed_at,
  duration_ms: e.duration_ms,
  error: e.error,
  retry_of: e.retry_of,
});
export const outcome = (e: Execution) => ({ ...summary(e), result: e.result ?? null, usage: e.usage ?? null });
export const listItem = (e: ExecutionListItem) => ({ ...summary(e), payload_preview: e.payload_preview, result_preview: e.result_preview });

type Structured = Record<string, unknown>;
/**
 * Answers up to this size are indented for a reader; larger ones go compact: indenting a large
 * result of many keys makes its text far larger, and it is serialised again (escaped) into the
 * JSON-RPC answer.
 */
const PRETTY_MAX_CHARS = 64 * 1024;
/**
 * A result: the structured answer and the same JSON as text. A turn of the event loop before
 * serialising it (the client parsed the API's answer in this one) and after, when it is large
 * (the SDK validates and serialises it next): each is a long step for a result of megabytes.
 */
export async function ok(data: Structured, text?: string) {
  await ownTurn();
  let json = text;
  if (json === undefined) {
    json = JSON.stringify(data);
    if (json.length <= PRETTY_MAX_CHARS) json = JSON.stringify(data, null, 2);
    else await ownTurn();
  }
  return { content: [{ type: 'text' as const, text: json }], structuredContent: data };
}
const failure = (message: string) => ({ content: [{ type: 'text' as const, text: message }], isError: true });

/** A 404 from the router (not from a resource lookup): the route does not exist on this server. */
export const missingRoute = (err: unknown) => err instanceof ApiError && err.status === 404 && err.message.startsWith('no route');

/** Domain refusals become error results in words; anything else (unreachable server) too. */
export function asFailure(err: unknown) {
  if (err instanceof ApiError) return failure(`${err.code}: ${err.message}`);
  return failure((err as Error)?.message ?? String(err));
}

/** How often a waiting run_task / trigger_schedule reads the status (BatonClient.waitFor reads only that). */
const WAIT_POLL_MS = 250;
export const waitUntilDone = (client: BatonClient, id: string, seconds: number) =>
  client.waitFor(id, { timeoutMs: seconds * 1000, intervalMs: WAIT_POLL_MS });
