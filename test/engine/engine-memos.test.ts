/**
 * The engine's bounded memos (src/engine/bounded.ts) drop their oldest entries at the bound, not
 * all of them: a claim woken for a commit in flight (ClaimWaits.served) outlives the entries left
 * behind before it. No store: plain memory.
 */
import { describe, expect, it } from 'vitest';
import { addRecent, setRecent } from '../../src/engine/bounded.ts';
import { IdleAgents } from '../../src/engine/idle-agents.ts';
import { ClaimWaits } from '../../src/engine/waiters.ts';

const turn = () => new Promise((r) => setImmediate(r));

describe('bounded memos', () => {
  it('drop the entry made or renewed longest ago, one for one', () => {
    const set = new Set<string>();
    const map = new Map<string, number>();
    for (const k of ['a', 'b', 'c']) {
      addRecent(set, k, 3);
      setRecent(map, k, 0, 3);
    }
    addRecent(set, 'a', 3); // renewed: now the newest
    setRecent(map, 'a', 1, 3);
    addRecent(set, 'd', 3);
    setRecent(map, 'd', 0, 3);
    expect([...set]).toEqual(['c', 'a', 'd']);
    expect([...map]).toEqual([
      ['c', 0],
      ['a', 1],
      ['d', 0],
    ]);
  });

  it("ClaimWaits at its bound of served executions still knows one served lately: its commit's announcement wakes nobody", async () => {
    const waits = new ClaimWaits(60_000, () => Date.now());
    const stop = new AbortController();
    let looks = 0;
    const claim = waits.wait('agent', 60_000, stop.signal, async () => {
      looks++;
      return [];
    });
    try {
      await turn();
      expect(looks).toBe(1); // parked
      // Served, their commits failed (no announcement came); then one whose commit is in flight,
      // and one more: the bound.
      for (let i = 0; i < 999; i++) waits.served(`ex_failed_${i}`);
      waits.served('ex_live');
      waits.served('ex_later');
      waits.seatFreed('agent', ['ex_live']); // its announcement: its claimer was served already
      await turn();
      expect(looks).toBe(1);
      waits.seatFreed('agent', ['ex_failed_0']); // dropped at the bound: announced, it wakes a claimer
      await turn();
      expect(looks).toBe(2);
    } finally {
      stop.abort();
      waits.close();
    }
    expect(await claim).toEqual([]);
  });

  it('IdleAgents at its bound keeps an agent marked idle lately, and a look that saw a forgotten change never marks', () => {
    const idle = new IdleAgents(60_000);
    idle.changed('stale');
    const seen = idle.seen('stale'); // a look at it begins
    for (let i = 0; i < 9_000; i++) idle.changed(`old${i}`);
    idle.changed('recent');
    idle.mark('recent', idle.seen('recent')); // its look found nothing queued
    for (let i = 0; i < 2_000; i++) idle.changed(`new${i}`); // past the bound: the oldest go, 'stale' first
    expect(idle.known('recent')).toBe(true);
    idle.changed('stale'); // work queued for it while the look was out, after it was forgotten
    idle.mark('stale', seen); // the look ends finding nothing: it must not mark
    expect(idle.known('stale')).toBe(false);
    // An agent not remembered (never changed, or forgotten) is marked by a look no change followed.
    for (let i = 0; i < 10_000; i++) idle.changed(`more${i}`);
    const quiet = idle.seen('quiet');
    idle.mark('quiet', quiet);
    expect(idle.known('quiet')).toBe(true);
    idle.changed('quiet');
    expect(idle.known('quiet')).toBe(false);
  });
});
