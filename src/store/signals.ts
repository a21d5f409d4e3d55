import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';

/**
 * Topics processes tell each other about. Messages are small (ids and codes, never payloads) and
 * never hold a newline; PostgreSQL carries them over LISTEN/NOTIFY, SQLite (one process) in memory.
 *   execution — `<agent>\t<execution ids, comma-separated>\t<status>` after status changes (see engine/announce.ts)
 *   log       — `<execution id>` after log lines were appended
 *   agent     — `<agent>` after an agent's settings changed (a raised cap may admit work)
 *   key       — `<key id>` after an API key was revoked (caches drop it, its open streams close)
 *   claim     — `<key id>\t<claim id>`, each URI-encoded, after a withdrawal of a claim found none
 *               waiting in its process (src/api/parked-claims.ts)
 */
export type Topic = 'execution' | 'log' | 'agent' | 'key' | 'claim';
export const TOPICS: readonly Topic[] = ['execution', 'log', 'agent', 'key', 'claim'];

/**
 * In-process fan-out with echo suppression: a message published here is delivered to local
 * subscribers at once, and its copy coming back from the database is dropped.
 */
export class LocalSignals {
  readonly origin = randomBytes(6).toString('base64url');
  private readonly emitter = new EventEmitter();
  constructor() {
    this.emitter.setMaxListeners(0);
  }
  deliver(topic: Topic, message: string): void {
    queueMicrotask(() => this.emitter.emit(topic, message, true));
  }
  /** A notification from the database: `<origin>|<message>`, or several messages a line each (packMessages). */
  deliverRemote(topic: Topic, payload: string): void {
    const bar = payload.indexOf('|');
    if (bar < 0 || payload.slice(0, bar) === this.origin) return;
    for (const message of payload.slice(bar + 1).split('\n')) this.emitter.emit(topic, message, false);
  }
  /** `local`: this process published the message (a listener that must act once across processes acts on these only). */
  on(topic: Topic, fn: (message: string, local: boolean) => void): () => void {
    this.emitter.on(topic, fn);
    return () => this.emitter.off(topic, fn);
  }
  listenerCount(): number {
    return TOPICS.reduce((n, t) => n + this.emitter.listenerCount(t), 0);
  }
  clear(): void {
    this.emitter.removeAllListeners();
  }
}

/**
 * One topic's messages, in order, as few notification payloads as hold them: `<prefix>` then the
 * messages a line each, each payload at most `maxBytes` bytes (a message too long for a payload of
 * its own goes alone). Every notification costs PostgreSQL a queue entry, and costs each listening
 * process a message to read and parse, whatever its size, and a busy process announces several
 * messages per task, many per event-loop turn.
 */
export function packMessages(messages: readonly string[], prefix: string, maxBytes: number): string[] {
  const payloads: string[] = [];
  const room = maxBytes - Buffer.byteLength(prefix);
  let lines: string[] = [];
  let bytes = 0;
  for (const m of messages) {
    const size = Buffer.byteLength(m) + 1; // the line and its newline
    if (lines.length > 0 && bytes + size > room) {
      payloads.push(prefix + lines.join('\n'));
      lines = [];
      bytes = 0;
    }
    lines.push(m);
    bytes += size;
  }
  if (lines.length > 0) payloads.push(prefix + lines.join('\n'));
  return payloads;
}
