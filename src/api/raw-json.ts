import type { FastifyReply } from 'fastify';
import { RAW_MEMBER_MIN_CHARS, RawJson } from '../domain/json.ts';
import { JsonSplice } from '../domain/json-splice.ts';
import { executionView, taskView, type ExecutionView, type TaskView } from '../engine/views.ts';
import type { ExecutionRow } from '../store/schema.ts';

/**
 * One answer whose long stored JSON values (results, payloads) go out as stored (JsonSplice).
 * `value` places a stored text in the answer; `answer` is what the handler returns.
 */
export class RawAnswer {
  private readonly splice = new JsonSplice();

  /** A stored JSON text as a value of the answer: parsed when short, spliced in when long (splicing pays only for long ones). */
  value(text: string | null): unknown {
    if (text === null || text.length < RAW_MEMBER_MIN_CHARS) return text === null ? null : JSON.parse(text);
    return this.splice.raw(text);
  }

  /** `body` as the handler returns it: itself, or its JSON text with the long values spliced in (typed as the body). */
  answer<T>(reply: FastifyReply, body: T): T {
    if (!this.splice.used) return body;
    void reply.type('application/json; charset=utf-8');
    return this.splice.stringify(body) as never;
  }

  /** An execution's view, its payload and result placed by `value`. */
  execution(row: ExecutionRow): ExecutionView {
    return viewPlacing(row, (text) => this.value(text));
  }

  /** A claimed task's view, its payload placed by `value`. */
  task(row: ExecutionRow): TaskView {
    return taskView(row, (text) => this.value(text));
  }
}

/**
 * A view whose `payload` is a stored JSON text (a schedule's, a subscription's template), as the
 * handler returns it: `view` built without parsing it (given `null` for it), the stored text
 * then placed as RawAnswer places it (a long one spliced in unparsed).
 */
export function withStoredPayload<T extends { payload: unknown }>(reply: FastifyReply, view: T, stored: string | null): T {
  const raw = new RawAnswer();
  return raw.answer(reply, { ...view, payload: raw.value(stored) });
}

/**
 * An answer that carries `row` as an execution view, as JSON text with the row's payload and result
 * spliced in as stored, whatever their length: nothing of them is parsed. What a submit answers and
 * stores with its idempotency key (a batch's thousand items included), and what a replay sends back
 * unparsed (src/engine/triggers/idempotency.ts).
 */
export function answerWithExecution(row: ExecutionRow, body: (execution: ExecutionView) => object): RawJson {
  const splice = new JsonSplice();
  const execution = viewPlacing(row, (text) => (text === null ? null : splice.raw(text)));
  return new RawJson(splice.stringify(body(execution)));
}

/** An execution's view with its stored payload and result placed by `place` (never parsed by the view). */
function viewPlacing(row: ExecutionRow, place: (text: string | null) => unknown): ExecutionView {
  return executionView(row, place);
}
