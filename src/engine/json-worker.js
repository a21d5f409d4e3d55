// A worker thread that checks and serialises JSON texts off the event loop, a batch of them per
// message (src/engine/json-thread.ts): parse, refuse a `__proto__` key or a `constructor.prototype` as
// the body parser does, and answer the value as JSON.stringify writes it. Plain JavaScript, so it
// loads in any worker (no TypeScript loader is inherited by worker threads under every runner).
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

parentPort.on('message', ({ id, texts }) => {
  const out = [];
  for (let index = 0; index < texts.length; index++) {
    const text = texts[index];
    try {
      const value = JSON.parse(text);
      // Only a text naming one can hold one (escaped or not): most are not walked.
      if ((text.includes('proto') || text.includes('constructor') || text.includes('\\u')) && poisoned(value)) {
        parentPort.postMessage({ id, index, error: 'Object contains forbidden prototype property' });
        return;
      }
      out.push(JSON.stringify(value));
    } catch (err) {
      parentPort.postMessage({ id, index, error: err instanceof Error ? err.message : String(err) });
      return;
    }
  }
  parentPort.postMessage({ id, texts: out });
});
