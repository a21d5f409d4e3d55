/**
 * The API's half of src/engine/json-thread.ts. A route names the body values it only stores
 * (`config.rawJsonPaths`: a completion's `result`, each batch item's `payload`); in a body over
 * LARGE_JSON_CHARS those are checked and serialised on the JSON thread and handed to the route as
 * RawJson, never parsed on the event loop. What is left is parsed here, and may hold at most
 * RAW_REST_MAX_VALUES values: all else such a body carries is short fields. Any text over
 * LARGE_JSON_CHARS that is parsed here (a body of a route that reads it all, or such a rest) is
 * first measured on the JSON thread, and refused if it holds more than MAX_JSON_SHAPES shapes.
 */
import { randomUUID } from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { BatonError } from '../domain/errors.ts';
import {
  jsonShape,
  LARGE_JSON_CHARS,
  MAX_JSON_SHAPES,
  RAW_REST_MAX_VALUES,
  RawJson,
  spansAt,
  tooManyShapesMessage,
  withPlaceholders,
  type PathSpan,
} from '../domain/json.ts';
import { canonicalJsonOffThread, jsonShapesOffThread, OffThreadJsonError } from '../engine/json-thread.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Paths of body values this route only stores (`result`, `items.*.payload`): see parseAroundRawPaths. */
    rawJsonPaths?: readonly string[];
  }
}

const where = (s: PathSpan) => ['body', ...s.path].join('.');

/**
 * `parse(text)`, but a text over LARGE_JSON_CHARS only once the JSON thread has counted its
 * object shapes: 413 past MAX_JSON_SHAPES (`where` names it), 400 invalid_json if it is not JSON;
 * the event loop never parses either.
 */
export async function parseMeasured(text: string, where: string, parse: (text: string) => Promise<unknown>): Promise<unknown> {
  if (text.length > LARGE_JSON_CHARS) {
    const shapes = await jsonShapesOffThread(text).catch((err: unknown) => {
      if (err instanceof OffThreadJsonError) throw new BatonError('invalid_json', `body: ${err.message}`);
      throw err;
    });
    if (shapes > MAX_JSON_SHAPES) throw new BatonError('payload_too_large', tooManyShapesMessage(where, shapes));
  }
  return parse(text);
}

/**
 * Parse `text` with the values at `paths` replaced by RawJson from the JSON thread; `parse` is the
 * body parser for the rest (each of those values replaced by a placeholder). 400 invalid_json
 * naming the first value that is not JSON; 413 when the rest holds more than RAW_REST_MAX_VALUES.
 */
export async function parseAroundRawPaths(
  text: string,
  paths: readonly string[],
  parse: (text: string) => Promise<unknown>,
): Promise<unknown> {
  // Each of three steps over a large body takes a turn of its own: decoding and measuring it (the
  // body parser, in the turn before), finding its raw values and parsing the rest, and posting the
  // raw values to the JSON thread (a copy of each, which for megabytes is a step of its own).
  await nextTurn();
  const spans = paths.flatMap((p) => spansAt(text, p.split('.'))).sort((a, b) => a.start - b.start);
  const mark = `baton-raw-${randomUUID()}-`;
  const rest = withPlaceholders(text, spans, mark);
  const left = jsonShape(rest).values;
  if (left > RAW_REST_MAX_VALUES) {
    throw new BatonError(
      'payload_too_large',
      `body: about ${left.toLocaleString('en-US')} JSON values besides ${paths.map((p) => `body.${p}`).join(', ')}, more than the ${RAW_REST_MAX_VALUES.toLocaleString('en-US')} such a body may hold there`,
    );
  }
  if (spans.length === 0) return parseMeasured(text, 'body', parse);
  const body = await parseMeasured(rest, `body besides ${paths.map((p) => `body.${p}`).join(', ')}`, parse);
  await nextTurn();
  const texts = await canonicalJsonOffThread(spans.map((s) => text.slice(s.start, s.end))).catch((err: unknown) => {
    if (err instanceof OffThreadJsonError) throw new BatonError('invalid_json', `${where(spans[err.index]!)}: ${err.message}`);
    throw err;
  });
  spans.forEach((s, i) => {
    let holder: unknown = body;
    for (const key of s.path.slice(0, -1))
      holder = holder !== null && typeof holder === 'object' ? (holder as Record<string, unknown>)[key] : undefined;
    const last = s.path.at(-1)!;
    if (holder !== null && typeof holder === 'object' && (holder as Record<string, unknown>)[last] === mark + i) {
      (holder as Record<string, unknown>)[last] = new RawJson(texts[i]!);
    }
  });
  return body;
}
