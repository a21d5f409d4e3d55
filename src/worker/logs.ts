import type { BatonClient } from '../client.ts';
import type { WorkerEvent } from './events.ts';
import { backoffMs, isLeaseLost, isTransient, sleep } from './retry.ts';

/**
 * Ships log lines in order: one request in flight at a time, batched by count and size, flushed
 * within ~100 ms. Transport errors keep the lines and retry; a lost lease drops them.
 */
export class LogShipper {
  private buf: Array<{ stream: 'stdout' | 'stderr'; line: string }> = [];
  private bufBytes = 0;
  private dropped = 0;
  private timer: NodeJS.Timeout | undefined;
  private inflight: Promise<void> | undefined;
  private dead = false;
  private closing = false;
  private failures = 0;
  /** Lines held while the server is unreachable; beyond this the oldest are counted and dropped. */
  private static readonly MAX_BUFFERED = 20_000;

  constructor(
    private readonly client: BatonClient,
    private readonly id: string,
    private readonly token: string,
    private readonly onLost: () => void,
    private readonly emit: (e: WorkerEvent) => void,
  ) {}

  push(stream: 'stdout' | 'stderr', text: string): void {
    if (this.dead) return;
    for (const line of String(text).split('\n')) {
      if (this.buf.length >= LogShipper.MAX_BUFFERED) {
        this.buf.shift();
        this.dropped++;
      }
      const cut = line.length > 60_000 ? line.slice(0, 60_000) : line;
      this.buf.push({ stream, line: cut });
      this.bufBytes += cut.length;
    }
    if (this.buf.length >= 500 || this.bufBytes >= 512 * 1024) this.kick(0);
    else this.kick(100);
  }

  private kick(delay: number) {
    if (this.timer || this.inflight || this.closing) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.inflight = this.send().finally(() => {
        this.inflight = undefined;
        if (this.buf.length > 0 && !this.dead) this.kick(this.failures ? backoffMs(this.failures) : 0);
      });
    }, delay);
  }

  private async send(): Promise<void> {
    if (this.buf.length === 0 || this.dead) return;
    const batch: typeof this.buf = [];
    let bytes = 0;
    if (this.dropped > 0) {
      batch.push({ stream: 'stderr', line: `[baton worker] ${this.dropped} log lines dropped while the server was unreachable` });
      this.dropped = 0;
    }
    while (this.buf.length > 0 && batch.length < 500 && bytes < 512 * 1024) {
      const l = this.buf.shift()!;
      bytes += l.line.length;
      this.bufBytes -= l.line.length;
      batch.push(l);
    }
    try {
      await this.client.appendLogs(this.id, this.token, batch);
      this.failures = 0;
    } catch (err) {
      if (isLeaseLost(err)) {
        this.dead = true;
        this.buf = [];
        this.onLost();
      } else if (isTransient(err)) {
        this.buf.unshift(...batch);
        this.bufBytes += bytes;
        this.failures++;
        this.emit({
          type: 'transport:error',
          op: 'logs',
          error: (err as Error)?.message ?? String(err),
          retryInMs: backoffMs(this.failures),
        });
      } else {
        this.emit({ type: 'error', op: 'logs', error: (err as Error)?.message ?? String(err) });
      }
    }
  }

  /** Send what is buffered (bounded: gives up after ~10 s of transport errors). */
  async close(): Promise<void> {
    this.closing = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.inflight;
    const until = Date.now() + 10_000;
    while (!this.dead) {
      if (this.buf.length === 0) break;
      if (Date.now() > until) break;
      if (this.failures) await sleep(Math.min(backoffMs(this.failures), 1000));
      this.inflight = this.send();
      await this.inflight;
      this.inflight = undefined;
    }
    this.dead = true;
  }
}
