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
  infiniteMessage,
  jsonShape,
  LARGE_JSON_CHARS,
  MAX_JSON_SHAPES,
  MAX_JSON_VALUES,
  RAW_REST_MAX_VALUES,
  RawJson,
  spansAt,
  tooDeepMessage,
  tooManyShapesMessage,
  tooManyValuesMessage,
  withPlaceholders,
  type PathSpan,
} from '../domain/json.ts';
import { bodyOffThread, canonicalJsonOffThread, jsonShapesOffThread, OffThreadJsonError } from '../engine/json-thread.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Paths of body values this route only stores (`result`, `items.*.payload`): see parseAroundRawPaths. */
    rawJsonPaths?: readonly string[];
  }
}

const where = (s: PathSpan) => ['body', ...s.path].join('.');

const restMessage = (paths: readonly string[], left: number) =>
  `body: about ${left.toLocaleString('en-US')} JSON values besides ${paths.map((p) => `body.${p}`).join(', ')}, more than the ${RAW_REST_MAX_VALUES.toLocaleString('en-US')} such a body may hold there`;

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
  if (left > RAW_REST_MAX_VALUES) throw new BatonError('payload_too_large', restMessage(paths, left));
  if (spans.length === 0) return parseMeasured(text, 'body', parse);
  const body = await parseMeasured(rest, `body besides ${paths.map((p) => `body.${p}`).join(', ')}`, parse);
  await nextTurn();
  const texts = await canonicalJsonOffThread(spans.map((s) => text.slice(s.start, s.end))).catch((err: unknown) => {
    if (err instanceof OffThreadJsonError) throw new BatonError('invalid_json', `${where(spans[err.index]!)}: ${err.message}`);
    throw err;
  });
  spans.forEach((s, i) => placeRaw(body, s.path, mark + i, texts[i]!));
  return body;
}

/** The raw value's text in place of its placeholder `placed` at `path` (not there: a later duplicate key won). */
function placeRaw(body: unknown, path: readonly string[], placed: string, text: string): void {
  let holder: unknown = body;
  for (const key of path.slice(0, -1))
    holder = holder !== null && typeof holder === 'object' ? (holder as Record<string, unknown>)[key] : undefined;
  const last = path.at(-1)!;
  if (holder !== null && typeof holder === 'object' && (holder as Record<string, unknown>)[last] === placed) {
    (holder as Record<string, unknown>)[last] = new RawJson(text);
  }
}

/**
 * parseAroundRawPaths for a body still in the chunks it was read in: the event loop never holds
 * its whole text. On this machine's kind of host, each megabyte a step first touches costs
 * milliseconds on its own, and the whole text was two such copies (joined, decoded) and a third
 * posted to the JSON thread. There the chunks are decoded and scanned as parseAroundRawPaths does
 * here, the same refusals in the same order; this thread parses the rest, and then receives the
 * raw values one message (and turn) each. `parseText`: a body that is not large once decoded, as
 * any small one.
 */
export async function parseBytesAroundRawPaths(
  chunks: readonly Buffer[],
  paths: readonly string[],
  parse: (text: string) => Promise<unknown>,
  parseText: (text: string) => Promise<unknown>,
): Promise<unknown> {
  const { key, scan } = await bodyOffThread.scan(chunks, paths).catch((err: unknown) => {
    if (err instanceof OffThreadJsonError) throw new BatonError('invalid_json', `body: ${err.message}`);
    throw err;
  });
  if ('text' in scan) return parseText(scan.text);
  if ('shape' in scan) {
    if (scan.shape.tooDeep) throw new BatonError('validation_error', tooDeepMessage('body'));
    if (scan.shape.values > MAX_JSON_VALUES) throw new BatonError('payload_too_large', tooManyValuesMessage('body', scan.shape.values));
    throw new BatonError('validation_error', infiniteMessage('body'));
  }
  if ('restValues' in scan) throw new BatonError('payload_too_large', restMessage(paths, scan.restValues));
  if ('invalid' in scan) throw new BatonError('invalid_json', `body: ${scan.invalid}`);
  const besides = 'rest' in scan ? `body besides ${paths.map((p) => `body.${p}`).join(', ')}` : 'body';
  if (scan.shapes !== undefined && scan.shapes > MAX_JSON_SHAPES)
    throw new BatonError('payload_too_large', tooManyShapesMessage(besides, scan.shapes));
  if ('whole' in scan) return parse(scan.whole);
  let taken = 0;
  try {
    const body = await parse(scan.rest);
    await nextTurn();
    const count = await bodyOffThread.check(key).catch((err: unknown) => {
      taken = scan.paths.length; // the thread let go of them with its refusal
      if (err instanceof OffThreadJsonError)
        throw new BatonError('invalid_json', `${['body', ...scan.paths[err.index]!].join('.')}: ${err.message}`);
      throw err;
    });
    for (; taken < count; taken++) placeRaw(body, scan.paths[taken]!, scan.mark + taken, await bodyOffThread.take(key, taken));
    return body;
  } finally {
    if (taken < scan.paths.length) void bodyOffThread.drop(key).catch(() => undefined);
  }
}
