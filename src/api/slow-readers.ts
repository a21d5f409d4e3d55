import { Readable } from 'node:stream';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { ConnectionLimits } from './deps.ts';

/**
 * Answers at least this large go out a slice at a time, as the client reads them (smaller ones
 * are written whole: the socket's own buffer and the kernel's take them).
 */
const SLICED_FROM_BYTES = 64 * 1024;
const SLICE_BYTES = 64 * 1024;

/** Which bound closed a connection that did not read (the `bound` label of the metric). */
export type SlowReaderBound = 'connection' | 'total';

/** One connection's answers not yet handed to its socket. */
interface Unread {
  socket: Socket;
  bytes: number;
  /** The ledger's tick at its last request or slice handed on: which connection has read least recently. */
  progress: number;
  answers: Set<SlicedAnswer>;
}

/**
 * The bytes of answers held in memory for clients that have not read them yet, per connection
 * and in all. Above `maxUnreadBytesPerConnection` on one connection (a client that asks again and
 * again without reading), that connection is closed; above `maxUnreadBytes` in all, the
 * connections that have read least recently are closed until the total is under it again. A
 * client that reads is never the one closed while one that stopped reading holds bytes.
 */
export class UnreadLedger {
  private readonly byConnection = new Map<Socket, Unread>();
  private total = 0;
  private tick = 0;
  /** Answers sent a slice at a time so far (metrics). */
  answers = 0;

  /** Told of each connection closed, and which bound closed it (metrics count them). */
  onClose: (bound: SlowReaderBound) => void = () => undefined;

  constructor(private readonly limits: Pick<ConnectionLimits, 'maxUnreadBytes' | 'maxUnreadBytesPerConnection'>) {}

  /** Bytes held for unread answers now, in all. */
  get bytes(): number {
    return this.total;
  }

  /** An answer of `bytes` bytes for `socket`, sliced as the socket drains; may close connections over a bound. */
  answer(socket: Socket, body: string | Buffer, bytes: number): Readable {
    let u = this.byConnection.get(socket);
    if (!u) {
      u = { socket, bytes: 0, progress: 0, answers: new Set() };
      this.byConnection.set(socket, u);
      socket.once('close', () => this.drop(socket));
    }
    // A new request is the client's latest sign of life, as a slice taken is.
    u.progress = ++this.tick;
    const answer = new SlicedAnswer(
      body,
      bytes,
      () => this.progressed(socket),
      (n) => this.released(socket, answer, n),
    );
    u.answers.add(answer);
    this.answers++;
    u.bytes += bytes;
    this.total += bytes;
    if (u.bytes > this.limits.maxUnreadBytesPerConnection) this.close(u, 'connection');
    this.keepUnderTotal();
    return answer;
  }

  private progressed(socket: Socket): void {
    const u = this.byConnection.get(socket);
    if (u) u.progress = ++this.tick;
  }

  private released(socket: Socket, answer: SlicedAnswer, n: number): void {
    this.total -= n;
    const u = this.byConnection.get(socket);
    if (!u) return;
    u.bytes -= n;
    u.answers.delete(answer);
  }

  /** The connection closed: its answers are let go (each tells `released`). */
  private drop(socket: Socket): void {
    const u = this.byConnection.get(socket);
    if (!u) return;
    for (const a of u.answers) a.destroy();
    this.byConnection.delete(socket);
  }

  private close(u: Unread, bound: SlowReaderBound): void {
    this.drop(u.socket);
    u.socket.destroy();
    this.onClose(bound);
  }

  private keepUnderTotal(): void {
    if (this.total <= this.limits.maxUnreadBytes) return;
    const held = [...this.byConnection.values()].filter((u) => u.bytes > 0).sort((a, b) => a.progress - b.progress);
    for (const u of held) {
      if (this.total <= this.limits.maxUnreadBytes) return;
      this.close(u, 'total');
    }
  }
}

/**
 * One answer, handed to the response a slice at a time as it asks (pipe's backpressure). Each
 * slice is a copy: a view into the whole answer would keep all of it alive for as long as the
 * socket holds that slice. A text answer stays one string until it is sent (a string this large is
 * freed whole when dropped, where a buffer of it may not be given back to the system).
 */
class SlicedAnswer extends Readable {
  private at = 0;
  /** Bytes of the body still held (all of them until it is let go: the sent part of a string cannot be freed alone). */
  held: number;

  constructor(
    private body: string | Buffer,
    bytes: number,
    /** A slice of `n` bytes went to the socket (progress). */
    private readonly handedOn: (n: number) => void,
    /** The body was let go: its `n` bytes are no longer held. */
    private readonly dropped: (n: number) => void,
  ) {
    super({ highWaterMark: SLICE_BYTES });
    this.held = bytes;
  }

  override _read(): void {
    const body = this.body;
    let end = Math.min(this.at + SLICE_BYTES / (typeof body === 'string' ? 2 : 1), body.length);
    let slice: Buffer;
    if (typeof body === 'string') {
      // Never between the two halves of a surrogate pair: each half alone would be sent as U+FFFD.
      const last = body.charCodeAt(end - 1);
      if (end < body.length && last >= 0xd800 && last <= 0xdbff) end--;
      slice = Buffer.from(body.slice(this.at, end), 'utf8');
    } else slice = Buffer.from(body.subarray(this.at, end));
    this.at = end;
    this.handedOn(slice.length);
    this.push(slice);
    // The last slice is handed on: the answer is let go now, not when the socket takes that slice.
    if (end >= body.length) {
      this.letGo();
      this.push(null);
    }
  }

  /** Let go of the body: the ledger stops counting its bytes. */
  private letGo(): void {
    if (this.held === 0) return;
    this.body = '';
    const n = this.held;
    this.held = 0;
    this.dropped(n);
  }

  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    this.letGo();
    done(err);
  }
}

/**
 * Large answers go out as the client reads them, and the bytes held for clients that do not read
 * are bounded (UnreadLedger): a client asking for big answers and never reading them cannot make
 * the server hold them all.
 */
export function boundUnreadAnswers(app: FastifyInstance, ledger: UnreadLedger): void {
  // A callback, not a promise: this runs for every answer.
  app.addHook('onSend', (req, reply, payload, done) => {
    if ((typeof payload !== 'string' && !Buffer.isBuffer(payload)) || req.method === 'HEAD') return done(null, payload);
    // A string's UTF-8 is at most 3 bytes per UTF-16 unit: most answers are known small unmeasured.
    if (payload.length < SLICED_FROM_BYTES / (typeof payload === 'string' ? 3 : 1)) return done(null, payload);
    const bytes = typeof payload === 'string' ? Buffer.byteLength(payload) : payload.length;
    if (bytes < SLICED_FROM_BYTES) return done(null, payload);
    // The connection is gone (closed over a bound, or by its client) while requests it had
    // pipelined were still being answered: no one will read this, and its close has passed, so
    // an answer held for it would never be let go. The response itself goes nowhere.
    if (req.raw.socket.destroyed) return done(null, payload);
    reply.header('content-length', bytes);
    done(null, ledger.answer(req.raw.socket, payload, bytes));
  });
}
