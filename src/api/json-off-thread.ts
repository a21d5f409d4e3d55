/**
 * Large JSON values checked and serialised on a worker thread. Parsing costs by the shape, not the
 * byte: 1.8 MiB of one object with 125,000 keys, or of 15,000 small objects whose keys all
 * differ, took 75–190 ms of `JSON.parse` here (docs/benchmarks.md), and whatever thread parses it
 * is held that long. A value that is only ever stored (a completion's result) need never be
 * parsed on the event loop: its text goes to this thread, which parses it (so it is JSON), refuses
 * a prototype key as the body parser does, and answers it as JSON.stringify writes it — the text
 * Baton stores, the same as for a value parsed here.
 */
import { randomUUID } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import { BatonError } from '../domain/errors.ts';
import { largeMembers, RawJson } from '../domain/json.ts';

type Reply = { id: number; text: string } | { id: number; error: string };

/** What the worker thread found wrong with a text: its parser's message. */
export class OffThreadJsonError extends Error {}

class JsonThread {
  private worker: Worker | undefined;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void }>();

  private start(): Worker {
    const worker = new Worker(new URL('./json-worker.js', import.meta.url));
    worker.on('message', (reply: Reply) => {
      const p = this.pending.get(reply.id);
      if (!p) return;
      this.pending.delete(reply.id);
      if (this.pending.size === 0) worker.unref();
      p.resolve(reply);
    });
    const fail = (err: Error) => {
      if (this.worker === worker) this.worker = undefined;
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`the JSON worker thread exited (${code})`)));
    // An idle thread must not keep a finished process alive; a text in flight must.
    worker.unref();
    return worker;
  }

  /** `text` as JSON.stringify(JSON.parse(text)) writes it; OffThreadJsonError when it is not JSON. */
  async canonical(text: string): Promise<string> {
    const worker = (this.worker ??= this.start());
    const id = this.nextId++;
    const reply = await new Promise<Reply>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.ref();
      worker.postMessage({ id, text });
    });
    if ('error' in reply) throw new OffThreadJsonError(reply.error);
    return reply.text;
  }
}

const thread = new JsonThread();

/** `text` checked and serialised off the event loop (one thread per process, started on first use). */
export const canonicalJsonOffThread = (text: string): Promise<string> => thread.canonical(text);

/** Members of a body shorter than this are parsed with the rest (it is also where answers start splicing). */
export const RAW_MEMBER_MIN_CHARS = 64 * 1024;

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Top-level body members this route only stores (a completion's `result`): when long, checked
     * and serialised off the event loop and handed to the route as RawJson. Any other long member
     * of such a route's body is refused: nothing else it takes is that long.
     */
    rawJsonMembers?: readonly string[];
  }
}

/**
 * Parse `text` on this thread except its long members: those named in `members` come back as
 * RawJson from the worker thread; any other long one is refused (400 naming it). `parse` is the
 * body parser for what is left (short: each long member is replaced by a placeholder).
 */
export async function parseAroundLongMembers(
  text: string,
  members: readonly string[],
  parse: (text: string) => Promise<unknown>,
): Promise<unknown> {
  const spans = largeMembers(text, RAW_MEMBER_MIN_CHARS);
  if (spans.length === 0) return parse(text);
  const other = spans.find((s) => !members.includes(s.key));
  if (other) {
    const n = (other.end - other.start).toLocaleString('en-US');
    throw new BatonError(
      'validation_error',
      `body.${other.key}: ${n} characters of JSON; this route takes that much only in ${members.join(', ')}`,
    );
  }
  // A placeholder no client can have sent: a later duplicate key overrides it, as JSON.parse would.
  const mark = `baton-raw-${randomUUID()}`;
  let rest = '';
  let at = 0;
  for (const s of spans) {
    rest += text.slice(at, s.start) + JSON.stringify(mark);
    at = s.end;
  }
  rest += text.slice(at);
  const [body, texts] = await Promise.all([
    parse(rest),
    Promise.all(
      spans.map((s) =>
        canonicalJsonOffThread(text.slice(s.start, s.end)).catch((err: unknown) => {
          if (err instanceof OffThreadJsonError) throw new BatonError('invalid_json', `body.${s.key}: ${err.message}`);
          throw err;
        }),
      ),
    ),
  ]);
  if (body !== null && typeof body === 'object') {
    const b = body as Record<string, unknown>;
    spans.forEach((s, i) => {
      if (b[s.key] === mark) b[s.key] = new RawJson(texts[i]!);
    });
  }
  return body;
}
