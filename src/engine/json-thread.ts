/**
 * Large JSON values checked and serialised on a worker thread. Parsing costs by the shape, not the
 * byte: a megabyte or two of one object with many keys, or of small objects whose keys all
 * differ, is a long `JSON.parse`, and whatever thread parses it is held that long. A value that is only ever stored (a completion's result, from the API or a
 * push agent's answer) need never be parsed on the event loop: its text goes to this thread, which
 * parses it (so it is JSON), refuses a prototype key as the API's body parser does, and answers it
 * as JSON.stringify writes it — the text Baton stores, the same as for a value parsed there.
 * Engine.complete takes it as RawJson (src/domain/json.ts). A large body the API must read is first
 * measured here (jsonShapesOffThread), so that one whose parsing would hold the event loop is
 * refused before anything parses it there (src/api/json-off-thread.ts).
 */
import { Worker } from 'node:worker_threads';
import type { JsonShape } from '../domain/json.ts';
import { ThreadCalls } from '../store/thread-calls.ts';

type Request =
  | { texts: readonly string[] }
  | { shapes: string }
  | { body: { key: number; chunks: readonly Uint8Array[]; paths: readonly string[] } }
  | { check: number }
  | { take: number; index: number }
  | { drop: number };
type Reply = { id: number } & (
  { texts: string[] } | { shapes: number } | { index: number; error: string } | BodyScan | { count: number } | { text: string }
);

/**
 * What the JSON thread made of a large body's bytes (json-worker.js, `body`): the decoded text if
 * it is not large after all; the jsonShape that refuses it; the count of values besides the raw
 * ones that refuses it; the whole text (it holds no raw value), or the rest around the raw values,
 * their placeholder mark and paths (the values held there); `shapes`: of the text to parse, when
 * large; `invalid`: that text is not JSON.
 */
export type BodyScan =
  | { text: string }
  | { shape: JsonShape }
  | { restValues: number }
  | { invalid: string }
  | { whole: string; shapes?: number }
  | { rest: string; mark: string; paths: string[][]; shapes?: number };

/** What the worker thread found wrong with the text at `index`: its parser's message. */
export class OffThreadJsonError extends Error {
  constructor(
    message: string,
    readonly index: number,
  ) {
    super(message);
  }
}

class JsonThread {
  private readonly calls = new ThreadCalls<Reply>(() => new Worker(new URL('./json-worker.js', import.meta.url)), 'the JSON worker thread');

  private nextBody = 1;

  private async request(message: Request, transfer?: readonly ArrayBuffer[]): Promise<Reply> {
    const reply = await this.calls.call(message, transfer);
    if ('error' in reply) throw new OffThreadJsonError(reply.error, reply.index);
    return reply;
  }

  /** Each text as JSON.stringify(JSON.parse(text)) writes it; OffThreadJsonError at the first that is not JSON. */
  async canonical(texts: readonly string[]): Promise<string[]> {
    return ((await this.request({ texts })) as { texts: string[] }).texts;
  }

  /** How many object shapes the JSON text holds (json-worker.js, keyOrders); OffThreadJsonError if it is not JSON. */
  async shapes(text: string): Promise<number> {
    return ((await this.request({ shapes: text })) as { shapes: number }).shapes;
  }

  /**
   * A body's bytes scanned on the thread (BodyScan), with the key its held raw values go by. The
   * chunks' buffers are moved there, not copied, where they can be (each chunk the whole of its own).
   */
  async scanBody(chunks: readonly Buffer[], paths: readonly string[]): Promise<{ key: number; scan: BodyScan }> {
    const key = this.nextBody++;
    const seen = new Set<ArrayBufferLike>();
    const moved = chunks.map((c) => {
      const whole = c.byteOffset === 0 && c.byteLength === c.buffer.byteLength && c.buffer instanceof ArrayBuffer && !seen.has(c.buffer);
      seen.add(c.buffer);
      return whole ? c : new Uint8Array(c);
    });
    const transfer = moved.map((c) => c.buffer as ArrayBuffer);
    let reply: Reply;
    try {
      reply = await this.request({ body: { key, chunks: moved, paths } }, transfer);
    } catch (err) {
      // A buffer Node keeps from being moved (a pooled one): copied instead.
      if (!(err instanceof Error && err.name === 'DataCloneError')) throw err;
      reply = await this.request({ body: { key, chunks: chunks.map((c) => new Uint8Array(c)), paths } });
    }
    return { key, scan: reply as BodyScan };
  }

  /** Check the raw values held for body `key` (as `canonical`): how many there are. */
  async checkHeld(key: number): Promise<number> {
    return ((await this.request({ check: key })) as { count: number }).count;
  }

  /** The checked raw value `index` of body `key`, handed over one at a time (each its own message). */
  async takeHeld(key: number, index: number): Promise<string> {
    return ((await this.request({ take: key, index })) as { text: string }).text;
  }

  /** Forget what is held for body `key` (a body refused before all of it was taken). */
  async dropHeld(key: number): Promise<void> {
    await this.request({ drop: key });
  }
}

const thread = new JsonThread();

/**
 * Texts checked and serialised off the event loop, in one message (one thread per process,
 * started on first use): a batch's thousand payloads cost one round trip, not a thousand.
 */
export const canonicalJsonOffThread = (texts: readonly string[]): Promise<string[]> => thread.canonical(texts);

/**
 * How many object shapes (distinct sequences of named keys, as a parser's hidden classes) the JSON
 * text holds, counted off the event loop: what parsing it there would cost beyond its bytes.
 */
export const jsonShapesOffThread = (text: string): Promise<number> => thread.shapes(text);

/** The JSON thread's side of a large body read as bytes (src/api/json-off-thread.ts, parseBytesAroundRawPaths). */
export const bodyOffThread = {
  scan: (chunks: readonly Buffer[], paths: readonly string[]) => thread.scanBody(chunks, paths),
  check: (key: number) => thread.checkHeld(key),
  take: (key: number, index: number) => thread.takeHeld(key, index),
  drop: (key: number) => thread.dropHeld(key),
};
