// A worker thread that checks JSON texts off the event loop (src/engine/json-thread.ts), in two
// kinds of message. `texts`: parse each, refuse a `__proto__` key or a `constructor.prototype` as
// the body parser does, and answer each value as JSON.stringify writes it. `shapes`: parse one text
// and answer how many object shapes it holds (keyOrders). Plain JavaScript, so it loads in any
// worker (no TypeScript loader is inherited by worker threads under every runner).
import { parentPort } from 'node:worker_threads';

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

parentPort.on('message', (msg) => {
  parentPort.postMessage(msg.texts ? canonical(msg.id, msg.texts) : shapes(msg.id, msg.shapes));
});
