import type { Engine } from '../engine/engine.ts';
import { iso } from '../engine/views.ts';
import type { ExecutionLogRow } from '../store/schema.ts';

/** One page of a log as a follow stream sends it: the SSE text built once for every follower. */
export interface FollowPage {
  /** `event: log` per line, ready to write. */
  text: Buffer;
  lines: number;
  /** The seq of its last line (the `after` of the next page). */
  last: number;
}

export const lineView = (l: ExecutionLogRow) => ({ seq: l.seq, at: iso(l.at)!, stream: l.stream, line: l.line });

interface Shared<T> {
  /** The tail's generation when the read started: it saw every change signalled before. */
  gen: number;
  value: Promise<T>;
}

/**
 * What the follow streams of one execution share. Every follower woke on the same append and
 * read the same pages: on SQLite through the main connection, many followers of a large append
 * held the event loop for seconds. Here a read (the status, or a page after a seq) already under way
 * is joined instead of repeated, and a page's text is built once and written to each follower.
 *
 * A follower may join a read only if it started after every change the follower has been told
 * of: `gen` counts wake-ups, a follower notes it before reading, and a read started at an older
 * `gen` is not joined (it might miss lines appended since). A follower that fell behind (it
 * waited for its client to read) asks for an older `after`: it finds the page in PageCache if
 * the page was full and is still kept, and reads it on its own otherwise.
 */
export class LogTail {
  gen = 0;
  private readonly wakers = new Set<() => void>();
  private head: Shared<{ status: string } | undefined> | undefined;
  private readonly pages = new Map<number, Shared<FollowPage>>();
  private readonly off: () => void;

  constructor(
    private readonly engine: Engine,
    readonly id: string,
    private readonly cache: PageCache,
  ) {
    const kick = () => {
      this.gen++;
      for (const w of this.wakers) w();
    };
    const offLog = engine.logs.onAppend(id, kick);
    const onChanged = (e: { id: string }) => e.id === id && kick();
    engine.events.on('execution:changed', onChanged);
    this.off = () => {
      offLog();
      engine.events.off('execution:changed', onChanged);
    };
  }

  /** Calls `wake` on every change (lines appended, status changed). Returns the unsubscribe. */
  onWake(wake: () => void): () => void {
    this.wakers.add(wake);
    return () => this.wakers.delete(wake);
  }

  get followers(): number {
    return this.wakers.size;
  }

  /** The execution's status (undefined once it is gone), as of a read that started at `seen` or later. */
  status(seen: number): Promise<{ status: string } | undefined> {
    if (!this.head || this.head.gen < seen) {
      const head: Shared<{ status: string } | undefined> = { gen: this.gen, value: this.engine.executionHead(this.id) };
      this.head = head;
      const forget = () => {
        if (this.head === head) this.head = undefined;
      };
      head.value.then(forget, forget);
    }
    return this.head.value;
  }

  /** Up to `limit` lines after `after`, as of a read that started at `seen` or later. */
  page(after: number, limit: number, seen: number): Promise<FollowPage> {
    const full = this.cache.get(this.id, after, limit);
    if (full) return Promise.resolve(full);
    let shared = this.pages.get(after);
    if (!shared || shared.gen < seen) {
      const read: Shared<FollowPage> = { gen: this.gen, value: this.read(after, limit) };
      shared = read;
      this.pages.set(after, read);
      const forget = () => {
        if (this.pages.get(after) === read) this.pages.delete(after);
      };
      read.value.then(forget, forget);
    }
    return shared.value;
  }

  close(): void {
    this.off();
  }

  private async read(after: number, limit: number): Promise<FollowPage> {
    const { lines } = await this.engine.logs.read(this.id, { after, limit });
    const text = lines.map((l) => `id: ${l.seq}\nevent: log\ndata: ${JSON.stringify(lineView(l))}\n\n`).join('');
    const page = { text: Buffer.from(text), lines: lines.length, last: lines.at(-1)?.seq ?? after };
    if (page.lines === limit && this.followers > 1) this.cache.set(this.id, after, limit, page);
    return page;
  }
}

/**
 * Recent full pages of followed logs, by execution and `after`, oldest dropped first past
 * FOLLOW_CACHE_BYTES. Followers of one append drift apart (each waits for its own client to
 * read), so sharing only the reads under way left most pages read once per follower. A full
 * page never changes (seqs are gap-free and lines are never rewritten); one that was not full
 * may still grow and is never kept.
 */
class PageCache {
  private readonly pages = new Map<string, FollowPage>();
  private bytes = 0;

  get(id: string, after: number, limit: number): FollowPage | undefined {
    return this.pages.get(`${id}:${after}:${limit}`);
  }

  set(id: string, after: number, limit: number, page: FollowPage): void {
    const key = `${id}:${after}:${limit}`;
    if (this.pages.has(key)) return;
    this.pages.set(key, page);
    this.bytes += page.text.length;
    for (const [k, p] of this.pages) {
      if (this.bytes <= FOLLOW_CACHE_BYTES) break;
      this.pages.delete(k);
      this.bytes -= p.text.length;
    }
  }

  forget(id: string): void {
    for (const [k, p] of this.pages)
      if (k.startsWith(`${id}:`)) {
        this.pages.delete(k);
        this.bytes -= p.text.length;
      }
  }
}

/**
 * Bytes of full pages kept for followers that come later (PageCache), in one process: 16 MiB is
 * a 4 MB log kept whole for four busy executions; past it the oldest pages are read again.
 */
const FOLLOW_CACHE_BYTES = 16 * 1024 * 1024;

/**
 * Bytes the follow streams of one process write in one event-loop turn. A 4 MB append with 100
 * followers is 400 MB to copy into sockets; written as fast as followers came for it, one turn
 * held the loop far too long in writev. Past this, a follower waits for the next turn (a page, at
 * most 1 MiB, always goes: the first write of a turn is never held).
 */
const FOLLOW_TURN_BYTES = 1024 * 1024;

/** The tails of one server: one per execution that has followers, gone with its last follower. */
export class LogTails {
  private readonly tails = new Map<string, LogTail>();
  private readonly cache = new PageCache();
  private turnBytes = 0;
  private turnEnds = false;
  /** Writers waiting for a later turn, served first come first (a follower woken by its drain does not pass them). */
  private readonly waiting: Array<{ bytes: number; go: () => void }> = [];
  constructor(private readonly engine: Engine) {}

  /** Resolves when `bytes` may be written in this turn (FOLLOW_TURN_BYTES): call it right before the write. */
  async writeTurn(bytes: number): Promise<void> {
    if (this.waiting.length === 0 && this.fits(bytes)) return this.take(bytes);
    await new Promise<void>((go) => this.waiting.push({ bytes, go }));
  }

  private fits(bytes: number): boolean {
    return this.turnBytes === 0 || this.turnBytes + bytes <= FOLLOW_TURN_BYTES;
  }

  private take(bytes: number): void {
    this.turnBytes += bytes;
    if (this.turnEnds) return;
    this.turnEnds = true;
    setImmediate(() => {
      this.turnEnds = false;
      this.turnBytes = 0;
      while (this.waiting.length > 0 && this.fits(this.waiting[0]!.bytes)) {
        const next = this.waiting.shift()!;
        this.take(next.bytes);
        next.go();
      }
    });
  }

  /** Followers of execution `id` in this process. */
  followers(id: string): number {
    return this.tails.get(id)?.followers ?? 0;
  }

  /** Follow `id`: `wake` is called on every change; the returned `leave` ends it. */
  join(id: string, wake: () => void): { tail: LogTail; leave: () => void } {
    let tail = this.tails.get(id);
    if (!tail) {
      tail = new LogTail(this.engine, id, this.cache);
      this.tails.set(id, tail);
    }
    const off = tail.onWake(wake);
    const joined = tail;
    return {
      tail,
      leave: () => {
        off();
        if (joined.followers === 0 && this.tails.get(id) === joined) {
          this.tails.delete(id);
          this.cache.forget(id);
          joined.close();
        }
      },
    };
  }
}
