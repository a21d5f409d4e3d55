import { randomBytes } from 'node:crypto';
import type { FastifyReply } from 'fastify';
import { executionView, type ExecutionView } from '../engine/views.ts';
import type { ExecutionRow } from '../store/schema.ts';

/** Stands in for the raw value while the rest is serialised: no client can write it (it is this process's secret). */
const MARK = JSON.stringify(`\u0000raw-${randomBytes(16).toString('hex')}`);

/** Texts shorter than this are parsed and serialised as usual: splicing pays only for large ones. */
const RAW_JSON_MIN_CHARS = 64 * 1024;

/**
 * `body` as JSON text, with `text` (already JSON: a stored result) as the value of its `key`.
 * A completion's answer carries its result back; parsing a stored result of 250,000 values and
 * serialising it again costs ~60 ms of the event loop, this a copy of the text.
 */
export function jsonWithRaw(body: Record<string, unknown>, key: string, text: string): string {
  const out = JSON.stringify({ ...body, [key]: JSON.parse(MARK) });
  const at = out.indexOf(MARK);
  return out.slice(0, at) + text + out.slice(at + MARK.length);
}

/**
 * What a handler returns for one execution (its view and `extra`): a large stored result goes
 * out as its text, spliced in (the answer is then a string, typed as the view for the route).
 */
export function executionAnswer<E extends Record<string, unknown>>(
  reply: FastifyReply,
  row: ExecutionRow,
  extra: E = {} as E,
): ExecutionView & E {
  if (row.result === null || row.result.length < RAW_JSON_MIN_CHARS) return Object.assign(executionView(row), extra);
  void reply.type('application/json; charset=utf-8');
  return jsonWithRaw(Object.assign(executionView({ ...row, result: null }), extra), 'result', row.result) as never;
}
