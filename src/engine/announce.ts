import { sql, type RawBuilder } from 'kysely';
import type { StoreAdapter } from '../store/adapter.ts';

export interface StatusChange {
  id: string;
  agent: string;
  status: string;
}

/** Ids per message: ~25 characters each stays well under PostgreSQL's 8,000-byte NOTIFY payload. */
export const IDS_PER_MESSAGE = 200;

/**
 * Tell every process about status changes (it wakes claimers when work was queued or a seat
 * freed, and feeds `execution:changed`). One message per agent and status carries up to 200
 * ids, `<agent>\t<id>,<id>,…\t<status>`: a scheduler batch of hundreds of rows is a few
 * NOTIFYs, not hundreds.
 */
export function announce(store: StoreAdapter, rows: readonly StatusChange[]): void {
  for (const m of messages(rows)) store.publish('execution', m);
}

/**
 * Announce changes whose statement already published them to the other processes
 * (`inStatement`): only this process's subscribers are told here.
 */
export function announceLocally(store: StoreAdapter, rows: readonly StatusChange[]): void {
  for (const m of messages(rows)) store.deliverLocal('execution', m);
}

/**
 * The `execution` message of one agent's changes to one status, built by the statement that
 * makes them from SQL text expressions (`ids`: comma-separated, at most IDS_PER_MESSAGE), for
 * `store.publishInStatement`. Undefined where the store publishes in process only.
 */
export function inStatement(store: StoreAdapter, agent: RawBuilder<string>, ids: RawBuilder<string>, status: RawBuilder<string>) {
  return store.publishInStatement?.(
    'execution',
    sql<string>`${agent}::text || ${'\t'}::text || ${ids}::text || ${'\t'}::text || ${status}::text`,
  );
}

function messages(rows: readonly StatusChange[]): string[] {
  const out: string[] = [];
  const groups = new Map<string, StatusChange[]>();
  for (const r of rows) {
    const key = `${r.agent}\t${r.status}`;
    const g = groups.get(key);
    if (g) g.push(r);
    else groups.set(key, [r]);
  }
  for (const g of groups.values()) {
    const { agent, status } = g[0]!;
    for (let i = 0; i < g.length; i += IDS_PER_MESSAGE) {
      const ids = g.slice(i, i + IDS_PER_MESSAGE).map((r) => r.id);
      out.push(`${agent}\t${ids.join(',')}\t${status}`);
    }
  }
  return out;
}

/** The changes one `execution` message carries (see announce). */
export function parseAnnouncement(message: string): { agent: string; ids: string[]; status: string } {
  const [agent = '', ids = '', status = ''] = message.split('\t');
  return { agent, ids: ids ? ids.split(',') : [], status };
}
