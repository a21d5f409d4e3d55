import { randomBytes } from 'node:crypto';
import type { FastifyReply } from 'fastify';
import { executionView, taskView, type ExecutionView, type TaskView } from '../engine/views.ts';
import type { ExecutionRow } from '../store/schema.ts';

/** Stands in for a long value while the rest is serialised: no client can write it (it is this process's secret). */
const MARK = `\u0000raw-${randomBytes(16).toString('hex')}-`;
/** A stand-in as it reads in JSON text, with its number. */
const MARKS = new RegExp(
  `${JSON.stringify(MARK)
    .slice(0, -1)
    .replace(/[\\^$.*+?()[\]{}|]/g, '\\$&')}(\\d+)"`,
  'g',
);

/** Texts shorter than this are parsed and serialised as usual: splicing pays only for long ones. */
const RAW_JSON_MIN_CHARS = 64 * 1024;

/**
 * One answer whose long stored JSON values (results, payloads) go out as stored: parsing a stored
 * value of 250,000 keys and serialising it again costs ~60 ms of the event loop, a splice a copy
 * of the text. `value` places a stored text in the answer; `answer` is what the handler returns.
 */
export class RawAnswer {
  private readonly texts: string[] = [];

  /** A stored JSON text as a value of the answer: parsed when short, a stand-in when long. */
  value(text: string | null): unknown {
    if (text === null || text.length < RAW_JSON_MIN_CHARS) return text === null ? null : JSON.parse(text);
    this.texts.push(text);
    return MARK + (this.texts.length - 1);
  }

  /** `body` as the handler returns it: itself, or its JSON text with the long values spliced in (typed as the body). */
  answer<T>(reply: FastifyReply, body: T): T {
    if (this.texts.length === 0) return body;
    void reply.type('application/json; charset=utf-8');
    return JSON.stringify(body).replace(MARKS, (_, i: string) => this.texts[Number(i)]!) as never;
  }

  /** An execution's view, its result placed by `value`. */
  execution(row: ExecutionRow): ExecutionView {
    return Object.assign(executionView({ ...row, result: null }), { result: this.value(row.result) });
  }

  /** A claimed task's view, its payload placed by `value`. */
  task(row: ExecutionRow): TaskView {
    return Object.assign(taskView({ ...row, payload: 'null' }), { payload: this.value(row.payload) });
  }
}
