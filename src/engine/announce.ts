import type { StoreAdapter } from '../store/adapter.ts';

export interface StatusChange {
  id: string;
  agent: string;
  status: string;
}

/** Ids per message: ~25 characters each stays well under PostgreSQL's 8,000-byte NOTIFY payload. */
const IDS_PER_MESSAGE = 200;

/**
 * Tell every process about status changes (it wakes claimers when work was queued or a seat
 * freed, and feeds `execution:changed`). One message per agent and status carries up to 200
 * ids, `<agent>\t<id>,<id>,…\t<status>`: a scheduler batch of hundreds of rows is a few
 * NOTIFYs, not hundreds.
 */
export function announce(store: StoreAdapter, rows: readonly StatusChange[]): void {
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
      store.publish('execution', `${agent}\t${ids.join(',')}\t${status}`);
    }
  }
}

/** The changes one `execution` message carries (see announce). */
export function parseAnnouncement(message: string): { agent: string; ids: string[]; status: string } {
  const [agent = '', ids = '', status = ''] = message.split('\t');
  return { agent, ids: ids ? ids.split(',') : [], status };
}
