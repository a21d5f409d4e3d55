import { createHash } from 'node:crypto';
import { DEFAULTS } from '../../config.ts';
import { IDEMPOTENCY_KEY_PATTERN } from '../../domain/batch.ts';
import { BatonError } from '../../domain/errors.ts';
import { RawJson } from '../../domain/json.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { EngineContext } from '../context.ts';

/**
 * Idempotency keys. A caller's `Idempotency-Key` is claimed in its own short transaction
 * (state `in_flight`), the work then runs, and the answer is stored with the work in the same
 * transaction (`completeKey`), so a created execution and its stored answer cannot part.
 * Keys come only from callers: never derive one from a body (two identical pings may be two
 * real events).
 */

export const IDEMPOTENCY = Object.freeze({
  /** How long a key remembers its answer by default (`baton up`: BATON_IDEMPOTENCY_TTL_HOURS). */
  ttlMs: DEFAULTS.idempotencyTtlHours * 3_600_000,
  /**
   * An in-flight claim older than this is taken over by the next request with the key: the
   * process that claimed it died mid-request. Longer than any trigger transaction can take.
   */
  lockMs: 60_000,
  /** How long a request waits for its key's in-flight first answer by default (`baton up`: BATON_IDEMPOTENCY_WAIT_MS). */
  waitMs: DEFAULTS.idempotencyWaitMs,
  pollMs: 25,
});

export interface IdemRequest {
  /** `agent:<name>` or `webhook:<id>`. */
  scope: string;
  key: string;
  /** Fingerprint of the request: same key with another fingerprint is a reuse (422). */
  hash: string;
}

/**
 * An answer as stored with its key and replayed. `body` is the value to send, or RawJson: its JSON
 * text already (an answer built around a stored payload without parsing it), which is stored and
 * replayed as it is. A replay's body is always RawJson: the stored text, never parsed here.
 */
export interface StoredAnswer {
  status: number;
  body: unknown;
}

/** The text stored for `answer`. */
const answerText = (answer: StoredAnswer) => (answer.body instanceof RawJson ? answer.body.text : JSON.stringify(answer.body));

/** A stored answer read back: its text, unparsed. */
const storedAnswer = (row: { status_code: number | null; response: string | null }): StoredAnswer => ({
  status: row.status_code!,
  body: new RawJson(row.response!),
});

/** The header's value, validated; undefined when absent. */
export function readIdempotencyKey(header: string | string[] | undefined, name = 'Idempotency-Key'): string | undefined {
  if (header === undefined) return undefined;
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined || !IDEMPOTENCY_KEY_PATTERN.test(value)) {
    throw new BatonError('validation_error', `header ${name}: must be 1-255 visible ASCII characters`);
  }
  return value;
}

export function fingerprint(...parts: Array<string | Buffer>): string {
  const h = createHash('sha256');
  for (const p of parts) h.update(p).update('\0');
  return h.digest('hex');
}

type Claim = { kind: 'claimed' } | { kind: 'completed'; answer: StoredAnswer } | { kind: 'in_flight' };

async function claimOnce(store: StoreAdapter, r: IdemRequest, now: number, ttlMs: number): Promise<Claim> {
  return store.transaction(async (tx) => {
    const fresh = {
      scope: r.scope,
      idem_key: r.key,
      request_hash: r.hash,
      state: 'in_flight' as const,
      locked_until: now + IDEMPOTENCY.lockMs,
      status_code: null,
      response: null,
      execution_id: null,
      created_at: now,
      expires_at: now + ttlMs,
    };
    // A concurrent first use blocks on the primary key until the other commits, then does nothing.
    const inserted = await tx
      .insertInto('idempotency_keys')
      .values(fresh)
      .onConflict((oc) => oc.columns(['scope', 'idem_key']).doNothing())
      .returning('scope')
      .executeTakeFirst();
    if (inserted) return { kind: 'claimed' };
    const row = await store
      .lockRows(tx.selectFrom('idempotency_keys').selectAll().where('scope', '=', r.scope).where('idem_key', '=', r.key), 'wait')
      .executeTakeFirstOrThrow();
    if (row.expires_at <= now) {
      // An expired key is forgotten: this request is a first use again.
      await tx.updateTable('idempotency_keys').set(fresh).where('scope', '=', r.scope).where('idem_key', '=', r.key).execute();
      return { kind: 'claimed' };
    }
    if (row.request_hash !== r.hash) {
      throw new BatonError(
        'idempotency_key_reused',
        `header Idempotency-Key: '${r.key}' was already used for a different request (within ${Math.round(ttlMs / 3_600_000)} h)`,
      );
    }
    if (row.state === 'completed') return { kind: 'completed', answer: storedAnswer(row) };
    if (row.locked_until < now) {
      await tx
        .updateTable('idempotency_keys')
        .set({ locked_until: now + IDEMPOTENCY.lockMs })
        .where('scope', '=', r.scope)
        .where('idem_key', '=', r.key)
        .execute();
      return { kind: 'claimed' };
    }
    return { kind: 'in_flight' };
  });
}

/**
 * Claim the key for this request, or learn the first answer. A request whose key is in flight
 * waits up to `waitMs` for that answer, then gets 409 idempotency_in_flight.
 */
export async function claimKey(
  store: StoreAdapter,
  r: IdemRequest,
  opts: { now: () => number; ttlMs?: number; waitMs?: number },
): Promise<{ kind: 'claimed' } | { kind: 'replay'; answer: StoredAnswer }> {
  const until = performance.now() + (opts.waitMs ?? IDEMPOTENCY.waitMs);
  for (;;) {
    const c = await claimOnce(store, r, opts.now(), opts.ttlMs ?? IDEMPOTENCY.ttlMs);
    if (c.kind === 'claimed') return c;
    if (c.kind === 'completed') return { kind: 'replay', answer: c.answer };
    if (performance.now() >= until) {
      throw new BatonError('idempotency_in_flight', `header Idempotency-Key: a request with '${r.key}' is still in flight; retry later`);
    }
    await new Promise((res) => setTimeout(res, IDEMPOTENCY.pollMs));
  }
}

/** Store the answer; call it in the transaction that did the work. */
export async function completeKey(tx: Tx, r: IdemRequest, answer: StoredAnswer, executionId: string | null): Promise<void> {
  await tx
    .updateTable('idempotency_keys')
    .set({ state: 'completed', status_code: answer.status, response: answerText(answer), execution_id: executionId })
    .where('scope', '=', r.scope)
    .where('idem_key', '=', r.key)
    .execute();
}

/** Forget an in-flight claim (the work failed in a way the caller should retry). */
export async function releaseKey(store: StoreAdapter, r: IdemRequest): Promise<void> {
  await store.db
    .deleteFrom('idempotency_keys')
    .where('scope', '=', r.scope)
    .where('idem_key', '=', r.key)
    .where('state', '=', 'in_flight')
    .execute();
}

/** Store a refusal the caller should see again on a replay (outside the work's transaction). */
export async function completeKeyAlone(
  store: StoreAdapter,
  r: IdemRequest,
  answer: StoredAnswer,
  executionId: string | null,
): Promise<void> {
  await store.transaction((tx) => completeKey(tx, r, answer, executionId));
}

/**
 * Idempotency keys as the engine's sub-service (`engine.idempotency`): the API claims, completes
 * and releases keys here. `ttlMs` and `waitMs` default to IDEMPOTENCY (`baton up`: the environment's).
 */
export class Idempotency {
  constructor(private readonly engine: EngineContext) {}

  claim(r: IdemRequest, opts: { ttlMs?: number; waitMs?: number } = {}) {
    return claimKey(this.engine.store, r, { now: () => this.engine.now(), ttlMs: opts.ttlMs, waitMs: opts.waitMs });
  }

  /** Store the answer inside the transaction that did the work. */
  complete(tx: Tx, r: IdemRequest, answer: StoredAnswer, executionId: string | null): Promise<void> {
    return completeKey(tx, r, answer, executionId);
  }

  /** Store a refusal on its own (see completeKeyAlone). */
  completeAlone(r: IdemRequest, answer: StoredAnswer, executionId: string | null): Promise<void> {
    return completeKeyAlone(this.engine.store, r, answer, executionId);
  }

  release(r: IdemRequest): Promise<void> {
    return releaseKey(this.engine.store, r);
  }
}

/**
 * How often every process runs the purge pass (±20 %). An expired key is refused as expired
 * whatever its row says, so the interval only bounds how long dead rows take space.
 */
export const PURGE_INTERVAL_MS = 60_000;
/** Keys one purge pass deletes at most: the pass stays one short transaction. */
export const PURGE_BATCH = 1000;

/** The purge pass: forget idempotency keys past their expiry. Safe to run in every process at once. */
export function purgeIdempotencyOnce(ctx: EngineContext): Promise<number> {
  return purgeExpiredKeys(ctx.store, ctx.now(), PURGE_BATCH);
}

/** Delete up to `limit` expired keys. */
export async function purgeExpiredKeys(store: StoreAdapter, now: number, limit = 1000): Promise<number> {
  const old = await store.db
    .selectFrom('idempotency_keys')
    .select(['scope', 'idem_key'])
    .where('expires_at', '<=', now)
    .limit(limit)
    .execute();
  if (old.length === 0) return 0;
  await store.transaction(async (tx) => {
    for (const k of old) {
      await tx
        .deleteFrom('idempotency_keys')
        .where('scope', '=', k.scope)
        .where('idem_key', '=', k.idem_key)
        .where('expires_at', '<=', now)
        .execute();
    }
  });
  return old.length;
}

// ── per-item keys of a batch submit (src/engine/submit-many.ts) ─────────────

/**
 * What a batch item's key holds, read inside the batch's transaction. The same rules as a
 * header key (claimOnce), in the same order: an expired key is free again; a key used for a
 * different request is refused; a completed one replays its first answer; an in-flight one whose
 * process died (past `locked_until`) is taken over; a live in-flight one is refused for now.
 */
export type KeyState =
  { kind: 'free'; exists: boolean } | { kind: 'replay'; answer: StoredAnswer } | { kind: 'reused' } | { kind: 'in_flight' };

/** Rows one statement reads or writes: bound values stay far below either store's limit. */
const KEY_CHUNK = 500;

/** The state of each key of `scope` (primary-key reads, KEY_CHUNK at a time). */
export async function readKeyStates(tx: Tx, requests: readonly IdemRequest[], now: number): Promise<Map<string, KeyState>> {
  const out = new Map<string, KeyState>();
  for (let i = 0; i < requests.length; i += KEY_CHUNK) {
    const chunk = requests.slice(i, i + KEY_CHUNK);
    const rows = await tx
      .selectFrom('idempotency_keys')
      .selectAll()
      .where('scope', '=', chunk[0]!.scope)
      .where(
        'idem_key',
        'in',
        chunk.map((r) => r.key),
      )
      .execute();
    const found = new Map(rows.map((r) => [r.idem_key, r]));
    for (const r of chunk) {
      const row = found.get(r.key);
      let state: KeyState;
      if (!row || row.expires_at <= now) state = { kind: 'free', exists: !!row };
      else if (row.request_hash !== r.hash) state = { kind: 'reused' };
      else if (row.state === 'completed') state = { kind: 'replay', answer: storedAnswer(row) };
      else if (row.locked_until < now) state = { kind: 'free', exists: true };
      else state = { kind: 'in_flight' };
      out.set(r.key, state);
    }
  }
  return out;
}

/** A first use of a key in a batch, with the answer to store (see storeKeyAnswers). */
export interface KeyAnswer {
  request: IdemRequest;
  /** The key's row exists (expired, or abandoned in flight) and is taken over. */
  exists: boolean;
  answer: StoredAnswer;
  executionId: string;
}

/**
 * Store completed answers for keys first used in this transaction. Returns the keys another
 * request took meanwhile (a header key claimed between the read and this write): the caller
 * rolls back and reads again, so a key never ends up with two executions. New keys go in one
 * multi-row insert per KEY_CHUNK; taken-over ones are updated one by one under the same guard
 * readKeyStates applied (rare: only dead keys are taken over).
 */
export async function storeKeyAnswers(tx: Tx, answers: readonly KeyAnswer[], now: number, ttlMs: number): Promise<string[]> {
  const lost: string[] = [];
  const values = (a: KeyAnswer) => ({
    scope: a.request.scope,
    idem_key: a.request.key,
    request_hash: a.request.hash,
    state: 'completed' as const,
    locked_until: now,
    status_code: a.answer.status,
    response: answerText(a.answer),
    execution_id: a.executionId,
    created_at: now,
    expires_at: now + ttlMs,
  });
  const fresh = answers.filter((a) => !a.exists);
  for (let i = 0; i < fresh.length; i += KEY_CHUNK) {
    const chunk = fresh.slice(i, i + KEY_CHUNK);
    const inserted = await tx
      .insertInto('idempotency_keys')
      .values(chunk.map(values))
      .onConflict((oc) => oc.columns(['scope', 'idem_key']).doNothing())
      .returning('idem_key')
      .execute();
    if (inserted.length < chunk.length) {
      const got = new Set(inserted.map((r) => r.idem_key));
      for (const a of chunk) if (!got.has(a.request.key)) lost.push(a.request.key);
    }
  }
  for (const a of answers) {
    if (!a.exists) continue;
    const taken = await tx
      .updateTable('idempotency_keys')
      .set(values(a))
      .where('scope', '=', a.request.scope)
      .where('idem_key', '=', a.request.key)
      .where((eb) => eb.or([eb('expires_at', '<=', now), eb.and([eb('state', '=', 'in_flight'), eb('locked_until', '<', now)])]))
      .executeTakeFirst();
    if (Number(taken.numUpdatedRows) === 0) lost.push(a.request.key);
  }
  return lost;
}
