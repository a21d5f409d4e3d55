// A worker thread that checks JSON texts off the event loop (src/engine/json-thread.ts). `texts`:
// parse each, refuse a `__proto__` key or a `constructor.prototype` as the body parser does, and
// answer each value as JSON.stringify writes it. `shapes`: parse one text and answer how many object
// shapes it holds (keyOrders). `body`: a large request body's bytes, decoded and scanned here
// (src/api/json-off-thread.ts says how); its raw values stay here until `held` checks them and
// `take` fetches each. Plain JavaScript, so it loads in any worker (no TypeScript loader is
// inherited by worker threads under every runner); the scanner is loaded on first use.
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { parentPort } from 'node:worker_threads';
import { lowerThisThreadsPriority } from '../store/thread-priority.js';

lowerThisThreadsPriority();

/** src/domain/json.ts: through tsx in a checkout (as bin/baton.js runs it), compiled in a package. */
let scanner;
async function scan() {
  if (!scanner) {
    const source = new URL('../domain/json.ts', import.meta.url);
    if (existsSync(source)) {
      const { register } = await import('tsx/esm/api');
      register();
      scanner = await import(source.href);
    } else {
      scanner = await import(new URL('../domain/json.js', import.meta.url).href);
    }
  }
  return scanner;
}

/** An own `__proto__` key, or a `constructor` holding a `prototype`, anywhere in `value`. */
function poisoned(value) {
  const stack = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (v === null || typeof v !== 'object') continue;
    if (!Array.isArray(v)) {
      if (Object.prototype.hasOwnProperty.call(v, '__proto__')) return true;
      const c = Object.prototype.hasOwnProperty.call(v, 'constructor') ? v.constructor : undefined;
      if (c !== null && typeof c === 'object' && Object.prototype.hasOwnProperty.call(c, 'prototype')) return true;
    }
    for (const child of Object.values(v)) if (child !== null && typeof child === 'object') stack.push(child);
  }
  return false;
}

/** A key V8 keeps as an array element, not a named property (no hidden class of its own). */
const isIndex = (key) => /^(?:0|[1-9]\d{0,9})$/.test(key) && Number(key) < 4294967295;

/**
 * The distinct sequences of named keys that the objects in `value` start with: one per key of a
 * trie of every object's keys in order. Each is a hidden class a parser creates on first sight, the
 * cost that makes a megabyte of objects whose keys differ (or come in different orders) take
 * many times longer to parse than the same bytes of alike objects.
 */
function keyOrders(value) {
  const root = new Map();
  let count = 0;
  const stack = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (v === null || typeof v !== 'object') continue;
    if (Array.isArray(v)) {
      for (const child of v) if (child !== null && typeof child === 'object') stack.push(child);
      continue;
    }
    let node = root;
    for (const key of Object.keys(v)) {
      const child = v[key];
      if (child !== null && typeof child === 'object') stack.push(child);
      if (isIndex(key)) continue;
      let next = node.get(key);
      if (next === undefined) {
        next = new Map();
        node.set(key, next);
        count++;
      }
      node = next;
    }
  }
  return count;
}

function canonical(id, texts) {
  const out = [];
  for (let index = 0; index < texts.length; index++) {
    const text = texts[index];
    try {
      const value = JSON.parse(text);
      // Only a text naming one can hold one (escaped or not): most are not walked.
      if ((text.includes('proto') || text.includes('constructor') || text.includes('\\u')) && poisoned(value)) {
        return { id, index, error: 'Object contains forbidden prototype property' };
      }
      out.push(JSON.stringify(value));
    } catch (err) {
      return { id, index, error: err instanceof Error ? err.message : String(err) };
    }
  }
  return { id, texts: out };
}

function shapes(id, text) {
  try {
    return { id, shapes: keyOrders(JSON.parse(text)) };
  } catch (err) {
    return { id, index: 0, error: err instanceof Error ? err.message : String(err) };
  }
}

/** Raw values of bodies scanned here, by the body's key: their texts, then their checked texts. */
const held = new Map();

/**
 * A large body's bytes: decoded, measured and split as the event loop would (json-off-thread.ts,
 * parseAroundRawPaths), so it receives only what it parses, never the whole text. The answer is
 * one of: `text` (not large once decoded: parsed there as any small body); `shape` (refused by
 * jsonShape); `restValues` (too many values besides the raw ones); `whole` and its `shapes` (no raw
 * value: the route reads it all); `rest`, its `shapes` when large, the placeholder `mark` and the
 * raw values' `paths` (their texts held here under `key`).
 */
async function body(id, { key, chunks, paths }) {
  const s = await scan();
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.length <= s.LARGE_JSON_CHARS) return { id, text };
  const shape = s.jsonShape(text);
  if (shape.tooDeep || shape.values > s.MAX_JSON_VALUES || shape.infinite) return { id, shape };
  const spans = paths.flatMap((p) => s.spansAt(text, p.split('.'))).sort((a, b) => a.start - b.start);
  const mark = `baton-raw-${randomUUID()}-`;
  const rest = s.withPlaceholders(text, spans, mark);
  const left = s.jsonShape(rest).values;
  if (left > s.RAW_REST_MAX_VALUES) return { id, restValues: left };
  const measured = spans.length === 0 ? text : rest;
  const reply = spans.length === 0 ? { id, whole: text } : { id, rest, mark, paths: spans.map((sp) => sp.path) };
  if (measured.length > s.LARGE_JSON_CHARS) {
    const counted = shapes(id, measured);
    if ('error' in counted) return { id, invalid: counted.error };
    reply.shapes = counted.shapes;
  }
  if (spans.length > 0) held.set(key, { texts: spans.map((sp) => text.slice(sp.start, sp.end)) });
  return reply;
}

/** The held raw values of body `key` checked (as `texts`): their count, or the first one's error. */
function check(id, key) {
  const h = held.get(key);
  if (!h) return { id, index: 0, error: 'no such body' };
  const out = canonical(id, h.texts);
  if ('error' in out) {
    held.delete(key);
    return out;
  }
  h.texts = out.texts;
  return { id, count: out.texts.length };
}

/** One checked raw value of body `key`, handed over (the last one ends the body's hold). */
function take(id, key, index) {
  const h = held.get(key);
  const text = h?.texts[index];
  if (h === undefined || text === undefined) return { id, index, error: 'no such value' };
  h.texts[index] = undefined;
  if (index === h.texts.length - 1) held.delete(key);
  return { id, text };
}

async function answer(msg) {
  if (msg.texts) return canonical(msg.id, msg.texts);
  if (msg.shapes !== undefined) return shapes(msg.id, msg.shapes);
  if (msg.body) return body(msg.id, msg.body);
  if (msg.check !== undefined) return check(msg.id, msg.check);
  if (msg.take !== undefined) return take(msg.id, msg.take, msg.index);
  held.delete(msg.drop);
  return { id: msg.id };
}

parentPort.on('message', (msg) => {
  answer(msg).then(
    (reply) => parentPort.postMessage(reply),
    (err) => parentPort.postMessage({ id: msg.id, index: 0, error: err instanceof Error ? err.message : String(err) }),
  );
});
