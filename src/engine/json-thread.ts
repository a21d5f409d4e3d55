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
import { ThreadCalls } from '../store/thread-calls.ts';

type Request = { texts: readonly string[] } | { shapes: string };
type Reply = { id: number; texts: string[] } | { id: number; shapes: number } | { id: number; index: number; error: string };

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

  private async request(message: Request): Promise<Reply> {
    const reply = await this.calls.call(message);
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
