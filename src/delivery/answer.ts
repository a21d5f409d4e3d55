/**
 * A push agent's HTTP answer turned into the execution's outcome: 2xx with a JSON body (its
 * status, result, error and usage, or the body as the result), 4xx and 5xx as failures that say
 * what the agent answered. Bodies are checked for shape before they are parsed, and a large one's
 * costly parts are parsed off the event loop.
 */
import { randomUUID } from 'node:crypto';
import type { BatonErrorCode } from '../domain/error-codes.ts';
import {
  infiniteMessage,
  jsonShape,
  LARGE_JSON_CHARS,
  largeMembers,
  MAX_JSON_SHAPES,
  MAX_JSON_VALUES,
  RAW_MEMBER_MIN_CHARS,
  RawJson,
  tooDeepMessage,
  tooManyShapesMessage,
  tooManyValuesMessage,
  withPlaceholders,
} from '../domain/json.ts';
import type { Outcome } from '../domain/outcomes.ts';
import { redactSecrets } from '../domain/redact.ts';
import { isCompletionStatus } from '../domain/states.ts';
import { canonicalJsonOffThread, jsonShapesOffThread, OffThreadJsonError } from '../engine/json-thread.ts';

/** What a push answer's text may not show in a stored error (the push URL's secret parts); applied before the text is cut short. */
export type Scrub = (text: string) => string;
const same: Scrub = (text) => text;

const snippet = (text: string, scrub: Scrub) => {
  const t = redactSecrets(scrub(text.replace(/\u0000/g, '\uFFFD')).trim());
  return t.length > 500 ? t.slice(0, 500) + '…' : t;
};

/** The members of a push answer `interpret` reads besides `result`; any other is ignored. */
const ANSWER_MEMBERS = ['status', 'error', 'usage'];

/**
 * `interpret`, without parsing a large answer's costly parts on the event loop: a long `result`
 * (or an answer that is not an object, the result whole) is checked and serialised on the JSON
 * thread (src/engine/json-thread.ts) and handed on as RawJson, a long member nobody reads is
 * skipped unparsed. What is left is parsed here as before, once the JSON thread has counted its
 * object shapes when it is itself large (MAX_JSON_SHAPES, as for a request body).
 */
export async function interpretAnswer(res: { status: number; text: string }, scrub: Scrub = same): Promise<Outcome> {
  const s = res.status;
  if (s < 200 || s >= 300 || res.text.length <= LARGE_JSON_CHARS) return interpret(res, scrub);
  const refused = shapeRefusal(res.text, s);
  if (refused) return refused;
  const notJson = (err: unknown, what: string) => {
    if (!(err instanceof OffThreadJsonError)) throw err;
    return invalidAnswer(`HTTP ${s} but ${what} is not JSON: ${snippet(err.message, scrub)}`);
  };
  if (!/^\s*\{/.test(res.text)) {
    try {
      const [text] = await canonicalJsonOffThread([res.text]);
      return { status: 'succeeded', result: new RawJson(text!) };
    } catch (err) {
      return notJson(err, 'the body');
    }
  }
  const spans = largeMembers(res.text, RAW_MEMBER_MIN_CHARS).filter((m) => !ANSWER_MEMBERS.includes(m.key));
  const mark = `baton-raw-${randomUUID()}-`;
  const rest = spans.length === 0 ? res.text : withPlaceholders(res.text, spans, mark);
  if (rest.length > LARGE_JSON_CHARS) {
    let shapes: number;
    try {
      shapes = await jsonShapesOffThread(rest);
    } catch (err) {
      return notJson(err, 'the body');
    }
    if (shapes > MAX_JSON_SHAPES) return invalidAnswer(`HTTP ${s} but ${tooManyShapesMessage('the body', shapes)}`);
  }
  const result = spans.findIndex((m) => m.key === 'result');
  let text: string | undefined;
  if (result !== -1) {
    try {
      [text] = await canonicalJsonOffThread([res.text.slice(spans[result]!.start, spans[result]!.end)]);
    } catch (err) {
      return notJson(err, "the body's result");
    }
  }
  const out = interpret({ status: s, text: rest }, scrub);
  if (text !== undefined && out.result === mark + result) out.result = new RawJson(text);
  return out;
}

const invalidAnswer = (message: string): Outcome => ({
  status: 'failed',
  error: { code: 'push_invalid_response' satisfies BatonErrorCode, message },
});

/** A 2xx answer's body refused by its shape before parsing (too deep, too many values, an overflowing number). */
function shapeRefusal(text: string, s: number): Outcome | undefined {
  const shape = jsonShape(text);
  if (!(shape.tooDeep || shape.values > MAX_JSON_VALUES || shape.infinite)) return undefined;
  const why = shape.tooDeep
    ? tooDeepMessage('the body')
    : shape.infinite
      ? infiniteMessage('the body')
      : tooManyValuesMessage('the body', shape.values);
  return invalidAnswer(`HTTP ${s} but ${why}`);
}

/** The agent's answer → the execution's outcome (`scrub` applied to any of its text an error quotes). */
export function interpret(res: { status: number; text: string }, scrub: Scrub = same): Outcome {
  const s = res.status;
  if (s >= 200 && s < 300) {
    if (res.text.trim() === '') return { status: 'succeeded', result: null };
    const refused = shapeRefusal(res.text, s);
    if (refused) return refused;
    let b: any;
    try {
      b = JSON.parse(res.text);
    } catch {
      return invalidAnswer(`HTTP ${s} but the body is not JSON: ${snippet(res.text, scrub) || '(empty)'}`);
    }
    // Results and usage are redacted where every outcome is, in Engine.complete.
    if (typeof b !== 'object' || b === null || Array.isArray(b)) return { status: 'succeeded', result: b };
    const status = b.status ?? 'succeeded';
    if (!isCompletionStatus(status)) {
      return invalidAnswer(`HTTP ${s} with an unknown status '${String(status).slice(0, 50)}' (expected succeeded, failed or cancelled)`);
    }
    const usage = typeof b.usage === 'object' && b.usage !== null && !Array.isArray(b.usage) ? b.usage : undefined;
    let error: Outcome['error'] = null;
    if (status !== 'succeeded') {
      const e = b.error;
      const message = typeof e === 'string' ? e : typeof e?.message === 'string' ? e.message : '';
      const code =
        typeof e?.code === 'string' && e.code
          ? e.code.slice(0, 100)
          : status === 'failed'
            ? ('agent_failed' satisfies BatonErrorCode)
            : ('cancelled' satisfies BatonErrorCode);
      error = { code, message: snippet(message, scrub) || `the agent reported ${status} without a message` };
    }
    return { status, result: b.result, error, usage };
  }
  if (s >= 400 && s < 500) {
    return {
      status: 'failed',
      error: {
        code: 'push_rejected' satisfies BatonErrorCode,
        message: `the agent answered HTTP ${s}${res.text.trim() ? `: ${snippet(res.text, scrub)}` : ' with an empty body'} (a 4xx is not re-delivered)`,
      },
    };
  }
  if (s >= 500) {
    return {
      status: 'failed',
      error: {
        code: 'push_server_error' satisfies BatonErrorCode,
        message: `the agent answered HTTP ${s}${res.text.trim() ? `: ${snippet(res.text, scrub)}` : ' with an empty body'}`,
      },
    };
  }
  return {
    status: 'failed',
    error: { code: 'push_unexpected_status' satisfies BatonErrorCode, message: `the agent answered HTTP ${s}; expected 2xx` },
  };
}
