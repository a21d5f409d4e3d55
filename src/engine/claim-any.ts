import { CLAIM_ANY } from '../domain/batch.ts';
import { CONTRACT_DEFAULTS } from '../domain/defaults.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { EMPTY_LOOKS_FROM } from './empty-looks.ts';
import { flowHint } from './pools.ts';
import type { AdmitOptions } from './transitions/admit.ts';
import type { ParkedRequest, Wake } from './waiter-set.ts';
import type { ClaimHint, ClaimWaits, Handoff } from './waiters.ts';

/** One agent of a claim on several: at most `max` of its tasks. */
export interface ClaimAnyItem {
  agent: string;
  max: number;
}

/**
 * How the caller of a waiting claim widens it (POST /v1/claim/widen): `add` is set while the claim
 * waits, and unset as it ends. It adds agents the claim does not ask for yet, each with its `max`,
 * and says whether it did: false once the claim is answering (its answer then has none of their
 * tasks), when one of them is in it already, or when they would take it over CLAIM_ANY.maxAgents.
 */
export interface Widening {
  add?: (items: readonly ClaimAnyItem[]) => boolean;
}

/** How a claim on several agents waits (engine.claimAny). */
export interface WaitAnyOptions {
  waitMs: number;
  /** Aborts when the caller left (or its key was revoked): stop, admitting nothing more. */
  signal?: AbortSignal;
  /**
   * Aborts when the caller asked to end the wait (a withdrawal): stop as if the wait were over.
   * A look already begun ends and its rows are answered, so a withdrawal never strands a lease.
   */
  end?: AbortSignal;
  /**
   * Parked, a submit of one of its agents may take it into its own call and commit (ClaimWaits.takeParked),
   * as a single claim: the request it would make for that agent, and how rows taken for it are announced.
   */
  handoff?: Pick<Handoff, 'admitted'> & { request(item: ClaimAnyItem): ParkedRequest };
  /**
   * Of the agents given, those a look would find nothing for and write nothing for (empty-looks.ts):
   * read first for a look at many agents none of which was woken for work (dropEmpty).
   */
  emptyLooks?: (agents: readonly string[]) => Promise<Set<string>>;
  /** Lets its caller add agents while it waits. */
  widening?: Widening;
}

/** The admission options through which one admission tells a waiting claim its ClaimHint. */
export function reportTo(hint: ClaimHint): Pick<AdmitOptions, 'onFlow' | 'onNothingQueued'> {
  return { onFlow: flowHint(hint), onNothingQueued: () => void (hint.nothingQueued = true) };
}

/** One agent's admission, as the single claim makes it (engine.admitOnce): the rules live there. */
export type AdmitAgent = (item: ClaimAnyItem, hint: ClaimHint, maxBytes: number) => Promise<ExecutionRow[]>;

/**
 * A long-poll claim on several agents: one waiter armed on each, one timer for them all. The first
 * look covers every agent except those known to have nothing queued (IdleAgents); after that it
 * looks at the agents whose waiters fired, each re-armed before its look (so a signal during the
 * look is not missed, as for a single claim: ClaimWaits.wait). It answers with the rows of the
 * first look that admits any, across the agents it looked at, each within its own `max`, cap and
 * holds (each agent's admission is the single claim's). A look whose admissions all fail throws
 * the first failure (an unknown agent, push delivery); one where another agent admitted rows
 * answers those, and the next claim reports the failure.
 *
 * Parked, it offers itself to a submit of each of its agents (`handoff`), as a single claim does:
 * the first wake-up of any kind withdraws every offer, so at most one submit takes it, and a taken
 * claim waits for that submit's answer whatever else happens (its caller leaving included: the
 * engine then gives the rows back). A submit that took nothing for it leaves that agent to its own look.
 * It offers itself while it looks too, for each agent the look does not cover or whose admission in
 * it found nothing: a worker re-claims after every answer, and a submit during that look would
 * otherwise miss the hand-off and wait for the whole look (its slowest admission) and then for a
 * look of its own. Taken during a look, it answers the look's rows and the submit's together.
 */
export async function waitAny(
  waits: ClaimWaits,
  items: readonly ClaimAnyItem[],
  o: WaitAnyOptions,
  admit: AdmitAgent,
): Promise<ExecutionRow[]> {
  const deadline = performance.now() + o.waitMs;
  const { signal, leave } = waits.track(o.signal);
  const byAgent = new Map(items.map((i) => [i.agent, i]));
  const armed = new Map<string, ReturnType<ClaimWaits['waiters']['attach']>>();
  /** Wakes not looked at yet: why, and the executions just queued they were for. */
  const fired = new Map<string, { why: Wake; work: readonly string[] }>();
  let ring: (() => void) | undefined;
  /** The answers of the offers out, by agent: a submit that took one settles it (TakenClaim.settle). */
  const answers = new Map<string, Promise<ExecutionRow[] | undefined>>();
  /** While set, agents offered may be taken by a submit (offerTo); the first wake-up of any kind unsets it. */
  let open: { handoff: NonNullable<WaitAnyOptions['handoff']>; maxBytes?: number } | undefined;
  const withdraw = () => {
    open = undefined;
    for (const a of armed.values()) a.offer(undefined);
  };
  const arm = (agent: string) => {
    const fire = (why: Wake, work: readonly string[]) => {
      armed.delete(agent);
      fired.set(agent, { why, work });
      withdraw();
      ring?.();
    };
    armed.set(agent, waits.waiters.attach(agent, fire, signal));
  };
  /** Offer the claim to a submit of `agent`, while offers are open and no wake-up has come. */
  const offerTo = (agent: string) => {
    const a = armed.get(agent);
    if (!open || !a || fired.size > 0) return;
    // Object.assign, not two spreads in a literal: V8's slow path on Node 20 (create.ts queuedValues).
    const request = Object.assign(
      {},
      open.handoff.request(byAgent.get(agent)!),
      open.maxBytes !== undefined ? { maxBytes: open.maxBytes } : {},
    );
    answers.set(agent, new Promise((settle) => a.offer({ request, settle })));
  };
  /** Open offers, to each armed agent not in `looking` (answers within `maxBytes` when given). */
  const offer = (handoff: NonNullable<WaitAnyOptions['handoff']>, looking: ReadonlySet<string>, maxBytes?: number) => {
    answers.clear();
    open = { handoff, maxBytes };
    for (const agent of armed.keys()) if (!looking.has(agent)) offerTo(agent);
  };
  /**
   * Set as the claim ends. Its caller reads `widening.add` for each widening (unset then), but one
   * that kept `add` past the end would otherwise arm a waiter nothing disarms, which would take the
   * next claimer's wake-up (test/engine/claim-any-widen.test.ts); the signals do not say it ended.
   */
  let ending = false;
  const widen = (more: readonly ClaimAnyItem[]): boolean => {
    if (ending || signal.aborted || o.end?.aborted) return false;
    if (byAgent.size + more.length > CLAIM_ANY.maxAgents || more.some((i) => byAgent.has(i.agent))) return false;
    for (const i of more) {
      byAgent.set(i.agent, i);
      if (waits.idle.known(i.agent)) {
        arm(i.agent);
        offerTo(i.agent);
      } else {
        // Armed before its look, as every woken agent is (below).
        fired.set(i.agent, { why: 'signal', work: [] });
        withdraw();
        ring?.();
      }
    }
    return true;
  };
  if (o.widening) o.widening.add = widen;
  try {
    for (const i of items) arm(i.agent);
    // A claim that does not wait looks at every agent: no later wake-up would make up for a skip.
    let look = o.waitMs > 0 ? items.filter((i) => !waits.idle.known(i.agent)) : [...items];
    let wakes = new Map<string, { why: Wake; work: readonly string[] }>();
    for (;;) {
      look = await dropEmpty(waits, look, wakes, armed, o.emptyLooks);
      // While it looks, a submit of an agent not in the look, or whose admission in it found nothing,
      // may take it as if it were parked: the look and that submit's call then answer together, each
      // agent within its own `max`, the answer's byte bound shared by the look's agents and the one taken.
      const offering = o.handoff !== undefined && o.waitMs > 0 && look.length > 0;
      const shares = look.length + (offering ? 1 : 0);
      if (offering) offer(o.handoff!, new Set(look.map((i) => i.agent)), share(shares));
      const looked = await lookAt(waits, look, armed, admit, shares, offerTo);
      withdraw();
      // A taken claim waits for its submit's answer whatever its look found (rows taken for it are never stranded).
      const early = await takenRows(fired, answers);
      if (early.length > 0) o.handoff!.admitted(early);
      const rows = [...looked.rows, ...early];
      if (rows.length > 0) {
        settleWakes(waits, armed, look, wakes, fired, rows);
        return rows;
      }
      if (looked.failure) throw looked.failure.reason;
      if (performance.now() >= deadline || signal.aborted || o.end?.aborted) return [];
      if (fired.size === 0) {
        if (o.handoff) offer(o.handoff, new Set());
        await sleepUntilRung(deadline, signal, o.end, (r) => (ring = r));
        withdraw();
      }
      ring = undefined;
      const taken = await takenRows(fired, answers);
      if (taken.length > 0) {
        o.handoff!.admitted(taken);
        settleWakes(waits, armed, [], new Map(), fired, taken);
        return taken;
      }
      if (fired.size === 0) return []; // the wait is over, the caller left or withdrew
      wakes = new Map(fired);
      fired.clear();
      look = [];
      for (const agent of wakes.keys()) {
        arm(agent);
        look.push(byAgent.get(agent)!);
      }
    }
  } finally {
    ending = true;
    if (o.widening?.add === widen) o.widening.add = undefined;
    for (const a of armed.values()) a.disarm();
    leave();
  }
}

/**
 * The rows a submit took for this claim (its wake-up `taken`), once that submit has answered; none
 * when no submit took it. A submit that took nothing for it (not decided there, or its call failed)
 * leaves its agent woken as by a signal, for the claim's own look.
 */
async function takenRows(
  fired: Map<string, { why: Wake; work: readonly string[] }>,
  answers: Map<string, Promise<ExecutionRow[] | undefined>>,
): Promise<ExecutionRow[]> {
  for (const [agent, w] of fired) {
    if (w.why !== 'taken') continue;
    const rows = await answers.get(agent);
    if (rows && rows.length > 0) {
      fired.delete(agent);
      return rows;
    }
    fired.set(agent, { why: 'signal', work: w.work });
  }
  return [];
}

/**
 * `look` without the agents a read says it would find nothing for and write nothing for
 * (`read`, empty-looks.ts), each marked as its admission finding no queued row would mark it
 * (IdleAgents, the waiter's nothingQueued). Read only for EMPTY_LOOKS_FROM agents or more not woken
 * for work just queued (the first look, the poll's) and not answered for by a look here before
 * (IdleAgents.seenBefore): one statement instead of their admissions. An agent a look here answered
 * for is marked idle by its admission when that took the last row it had queued (the claim call's
 * 'empty': postgres-fast-paths.ts), so a look that covers it again mostly finds work, and the read
 * would be a round trip for nothing. Their waiters were armed before the read, so work committed
 * after its snapshot wakes them, and an agent whose waiter fired meanwhile is looked at next. A
 * read that fails leaves the look whole.
 */
async function dropEmpty(
  waits: ClaimWaits,
  look: ClaimAnyItem[],
  wakes: ReadonlyMap<string, { work: readonly string[] }>,
  armed: ReadonlyMap<string, { nothingQueued(): void }>,
  read: WaitAnyOptions['emptyLooks'],
): Promise<ClaimAnyItem[]> {
  if (!read) return look;
  const unfed = look.filter((i) => (wakes.get(i.agent)?.work.length ?? 0) === 0 && !waits.idle.seenBefore(i.agent)).map((i) => i.agent);
  if (unfed.length < EMPTY_LOOKS_FROM) return look;
  const seen = new Map(unfed.map((agent) => [agent, waits.idle.seen(agent)]));
  let empty: Set<string>;
  try {
    empty = await read(unfed);
  } catch {
    return look;
  }
  if (empty.size === 0) return look;
  for (const agent of empty) {
    waits.idle.looked(agent);
    waits.idle.mark(agent, seen.get(agent)!);
    armed.get(agent)?.nothingQueued();
  }
  return look.filter((i) => !empty.has(i.agent));
}

/** The answer's byte bound, shared by `shares` admissions: each stops at its share (always one row). */
const share = (shares: number) => Math.ceil(CONTRACT_DEFAULTS.claimAnswerBytes / shares);

/**
 * Most admissions a look starts in one turn of the event loop. Starting one is synchronous work
 * (its options, its transaction or gathered call queued), and on SQLite the admissions started in
 * a turn run as that turn's group commit: a look at 1,000 agents started them all in one turn, a
 * stretch of 8–30 ms before any of them ran. Started a chunk a turn, each turn holds one chunk's
 * starts and (SQLite) its group; a look at no more agents than this starts them all at once.
 */
export const LOOK_CHUNK = 100;

/** One look at `look`'s agents (`shares` admissions share the answer's bytes), LOOK_CHUNK started a turn: the rows they admitted, and the first failure. */
async function lookAt(
  waits: ClaimWaits,
  look: readonly ClaimAnyItem[],
  armed: Map<string, { nothingQueued(): void }>,
  admit: AdmitAgent,
  shares: number,
  /** An agent's admission found nothing: a submit of it may now take the claim. */
  empty: (agent: string) => void,
): Promise<{ rows: ExecutionRow[]; failure?: PromiseRejectedResult }> {
  if (look.length === 0) return { rows: [] };
  const maxBytes = share(shares);
  const one = async (item: ClaimAnyItem) => {
    const seen = waits.idle.seen(item.agent);
    const hint: ClaimHint = {};
    const rows = await admit(item, hint, maxBytes);
    waits.idle.looked(item.agent);
    if (hint.pools !== undefined) waits.notePools(item.agent, hint.pools);
    // Nothing queued is left (found so, or this admission took all there was): the worker's next
    // claim, sent as this one answers, need not look at the agent until work is queued.
    if (hint.nothingQueued) waits.idle.mark(item.agent, seen);
    if (rows.length === 0) {
      if (hint.nothingQueued) armed.get(item.agent)?.nothingQueued();
      if (hint.reopensAt !== undefined) waits.reopenIn(item.agent, hint.reopensAt - waits.now());
      empty(item.agent);
    }
    return rows;
  };
  // Each chunk's outcomes are awaited as it starts, so an admission that fails while a later chunk
  // waits for its turn is never an unhandled rejection.
  const chunks: Array<Promise<PromiseSettledResult<ExecutionRow[]>[]>> = [];
  for (let i = 0; i < look.length; i += LOOK_CHUNK) {
    if (i > 0) await new Promise((r) => setImmediate(r));
    chunks.push(Promise.allSettled(look.slice(i, i + LOOK_CHUNK).map(one)));
  }
  const rows: ExecutionRow[] = [];
  let failure: PromiseRejectedResult | undefined;
  for (const s of (await Promise.all(chunks)).flat()) {
    if (s.status === 'fulfilled') rows.push(...s.value);
    else failure ??= s;
  }
  return { rows, failure };
}

/**
 * Answering with `rows`: each agent looked at passes on the work its wake was for and its look did
 * not take (ClaimWaits.passOn), and a wake that fired during the look, not looked at, goes to the
 * next claimer of its agent. This claim's own waiters are disarmed first, so none takes it back.
 */
function settleWakes(
  waits: ClaimWaits,
  armed: Map<string, { disarm(): void }>,
  look: readonly ClaimAnyItem[],
  wakes: Map<string, { why: Wake; work: readonly string[] }>,
  fired: Map<string, { why: Wake; work: readonly string[] }>,
  rows: readonly ExecutionRow[],
): void {
  for (const a of armed.values()) a.disarm();
  armed.clear();
  for (const { agent } of look) {
    const w = wakes.get(agent);
    if (w) waits.passOn(agent, w.why, w.work, rows);
  }
  for (const [agent, w] of fired) waits.waiters.wake(agent, false, w.why === 'taken' ? 'signal' : w.why, w.work);
}

/** Resolves when rung, at `deadline`, or when either signal aborts; leaves no timer behind. */
function sleepUntilRung(
  deadline: number,
  signal: AbortSignal,
  end: AbortSignal | undefined,
  setRing: (r: () => void) => void,
): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      end?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, deadline - performance.now()));
    signal.addEventListener('abort', done, { once: true });
    end?.addEventListener('abort', done, { once: true });
    setRing(done);
  });
}
