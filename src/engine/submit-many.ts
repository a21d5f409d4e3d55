import { BatonError, NotFound } from '../domain/errors.ts';
import { BATCH } from '../domain/batch.ts';
import { LARGE_JSON_CHARS } from '../domain/json.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { AgentRow, ExecutionRow } from '../store/schema.ts';
import { lockAgentsForNewWork } from './agent-lock.ts';
import { backlogs } from './backlog.ts';
import { appendAudit } from './audit.ts';
import { createExecutions, queuedValues, type NewQueued } from './transitions/create.ts';
import {
  IDEMPOTENCY,
  readKeyStates,
  storeKeyAnswers,
  type IdemRequest,
  type KeyAnswer,
  type StoredAnswer,
} from './triggers/idempotency.ts';
import type { EngineContext } from './context.ts';
import { announce } from './announce.ts';
import { newRow, type SubmitInput } from './submit-input.ts';

/**
 * Batch submit: up to BATCH.maxItems new executions for one agent in one transaction, with an
 * answer per item. Partial success is the rule, not an accident: the agent's backlog room is
 * counted once under its new-work turn, the items that fit are created in order, and each item
 * past the room is refused `backlog_full`, all in the same commit. An item with an idempotency
 * key that was used before (by a batch item or an Idempotency-Key header, same agent, same
 * request) answers with its first answer instead, marked replayed; so a retried batch never
 * creates an item twice.
 */

/** One item: the execution's values (built by the engine) and its key, if the caller gave one. */
export interface BatchItem {
  row: NewQueued;
  idem?: IdemRequest;
}

export type BatchOutcome =
  | { index: number; kind: 'created'; id: string; status: 'queued' }
  /** The key's first answer, as stored (a 201 Created body, or a refusal's `{ error, message }`). */
  | { index: number; kind: 'replayed'; answer: StoredAnswer }
  | { index: number; kind: 'refused'; error: BatonError };

export interface BatchOptions {
  now: number;
  actor: string;
  /** How long a first-used key remembers its answer. */
  ttlMs: number;
  /** The answer stored with each keyed item it creates (what a later replay, batch or single, returns). */
  answerFor?: (row: ExecutionRow) => StoredAnswer;
}

/** A key another request took between this batch's read and its write: roll back, read again. */
export class KeyRace extends Error {
  constructor(readonly keys: string[]) {
    super(`idempotency keys taken meanwhile: ${keys.join(', ')}`);
  }
}

/** One item of a batch submit: the task, and its idempotency key (`hash`: the request's fingerprint) if given. */
export interface SubmitManyItem extends SubmitInput {
  idem?: { key: string; hash: string };
}

export interface SubmitManyOptions {
  /** How long a first-used key remembers its answer. Default IDEMPOTENCY.ttlMs. */
  ttlMs?: number;
  /** The answer stored with each keyed item created (what a replay returns). Default `{ execution_id, status, agent }`. */
  answerFor?: (row: ExecutionRow) => StoredAnswer;
}

/**
 * Create up to BATCH.maxItems executions for one agent in one transaction, answering per item
 * (submitBatch below): created, replayed (a key used before: its first answer) or
 * refused (backlog_full past the room; a key reused or in flight). NotFound for an unknown
 * agent and a validation_error for a bad batch (too many items, a key given twice) refuse it
 * whole. Keys are scoped to the agent, as the Idempotency-Key header of a single submit is.
 */
export async function submitMany(
  engine: EngineContext,
  agentName: string,
  items: readonly SubmitManyItem[],
  actor: string,
  opts: SubmitManyOptions = {},
): Promise<BatchOutcome[]> {
  if (items.length > BATCH.maxItems)
    throw new BatonError('validation_error', `body.items: at most ${BATCH.maxItems} items (got ${items.length})`);
  const seen = new Map<string, number>();
  items.forEach((item, i) => {
    // A key's caps, throttle and fairness apply to batch items; debounce and singleton do not
    // (src/api/schemas/batch.ts says why): refused whole, naming the item's field.
    for (const field of ['debounce_seconds', 'singleton'] as const) {
      if (item[field] != null && item[field] !== false)
        throw new BatonError('validation_error', `body.items.${i}.${field}: not taken in a batch; submit this item alone`, { field });
    }
    if (!item.idem) return;
    const first = seen.get(item.idem.key);
    if (first !== undefined) {
      throw new BatonError('validation_error', `body.items.${i}.idempotency_key: repeats body.items.${first}'s ('${item.idem.key}')`);
    }
    seen.set(item.idem.key, i);
  });
  if (items.length === 0) return [];
  const scope = `agent:${agentName}`;
  // A large batch is written off the event loop where the store can (SQLite's writer thread), so
  // its inserts and the COMMIT of megabytes of WAL do not hold every other request.
  const large = items.reduce((n, i) => n + i.message.length + (i.payloadJson?.length ?? 0), 0) > LARGE_JSON_CHARS;
  const run = large && engine.store.offLoopTransaction ? engine.store.offLoopTransaction : engine.store.transaction;
  for (let attempt = 1; ; attempt++) {
    const now = engine.now();
    try {
      const out = await run((tx) =>
        submitBatch(
          tx,
          engine.store,
          agentName,
          (agent) =>
            items.map((item) => ({
              row: newRow(agent, item.idem ? { ...item, idempotency_key: item.idem.key } : item),
              idem: item.idem && { scope, ...item.idem },
            })),
          { now, actor, ttlMs: opts.ttlMs ?? IDEMPOTENCY.ttlMs, answerFor: opts.answerFor },
        ),
      );
      announce(
        engine.store,
        out.flatMap((o) => (o.kind === 'created' ? [{ id: o.id, agent: agentName, status: o.status }] : [])),
      );
      return out;
    } catch (err) {
      // A header key claimed between this batch's read and write: read again (it now replays or waits).
      if (!(err instanceof KeyRace)) throw err;
      if (attempt >= 3)
        throw new BatonError('idempotency_in_flight', `body.items: idempotency keys ${err.keys.join(', ')} are in flight; retry later`);
    }
  }
}

/**
 * Create the batch's executions inside `tx` (the engine's submitMany runs it and retries on
 * KeyRace). Throws NotFound for an unknown agent; everything else is answered per item.
 * Audit: one `execution.create` row for the batch (its ids and count), and one
 * `execution.refused` row when items were refused for room.
 */
export async function submitBatch(
  tx: Tx,
  store: StoreAdapter,
  agentName: string,
  build: (agent: AgentRow) => BatchItem[],
  opts: BatchOptions,
): Promise<BatchOutcome[]> {
  const [agent] = await lockAgentsForNewWork(tx, store, [agentName]);
  if (!agent) throw new NotFound('agent', agentName);
  const items = build(agent);
  const keyed = items.filter((i) => i.idem).map((i) => i.idem!);
  const states = keyed.length > 0 ? await readKeyStates(tx, keyed, opts.now) : new Map();
  // Under the new-work turn no other creator of this agent's work runs, and claims only lower
  // the backlog: the room read here holds until the commit.
  let room = agent.max_backlog - ((await backlogs(tx, [agent.name])).get(agent.name) ?? 0);

  const out: BatchOutcome[] = [];
  const created: BatchItem[] = [];
  let full = 0;
  items.forEach((item, index) => {
    const state = item.idem ? states.get(item.idem.key) : undefined;
    if (state?.kind === 'replay') return out.push({ index, kind: 'replayed', answer: state.answer });
    if (state?.kind === 'reused') {
      return out.push({
        index,
        kind: 'refused',
        error: new BatonError(
          'idempotency_key_reused',
          `body.items.${index}.idempotency_key: '${item.idem!.key}' was already used for a different request`,
        ),
      });
    }
    if (state?.kind === 'in_flight') {
      return out.push({
        index,
        kind: 'refused',
        error: new BatonError(
          'idempotency_in_flight',
          `body.items.${index}.idempotency_key: a request with '${item.idem!.key}' is still in flight; retry later`,
        ),
      });
    }
    if (room <= 0) {
      full++;
      return out.push({
        index,
        kind: 'refused',
        error: new BatonError(
          'backlog_full',
          `body.items.${index}: agent '${agent.name}' already has ${agent.max_backlog} queued executions (max_backlog)`,
          {
            agent: agent.name,
            max_backlog: agent.max_backlog,
          },
        ),
      });
    }
    room--;
    created.push(item);
    out.push({ index, kind: 'created', id: item.row.id, status: 'queued' });
  });

  if (created.length > 0) {
    await createExecutions(tx, store, {
      backlog: 'counted',
      agents: [agent],
      rows: created.map((i) => queuedValues(i.row, opts.now, opts.actor)),
      audit: {
        batch: {
          at: opts.now,
          actor: opts.actor,
          action: 'execution.create',
          subject: agent.name,
          detail: { trigger: created[0]!.row.trigger_kind, batch: true, count: created.length, ids: created.map((i) => i.row.id) },
        },
      },
    });
    const withKeys = created.filter((i) => i.idem);
    if (withKeys.length > 0) {
      // The stored answer carries the whole row, as a single submit's does: read the keyed rows back.
      const rows = new Map<string, ExecutionRow>();
      for (let i = 0; i < withKeys.length; i += 500) {
        const ids = withKeys.slice(i, i + 500).map((k) => k.row.id);
        for (const r of await tx.selectFrom('executions').selectAll().where('id', 'in', ids).execute()) rows.set(r.id, r);
      }
      const answers: KeyAnswer[] = withKeys.map((i) => {
        const row = rows.get(i.row.id)!;
        const state = states.get(i.idem!.key) as { exists: boolean } | undefined;
        return {
          request: i.idem!,
          exists: state?.exists ?? false,
          answer: opts.answerFor?.(row) ?? { status: 201, body: { execution_id: row.id, status: row.status, agent: row.agent } },
          executionId: row.id,
        };
      });
      const lost = await storeKeyAnswers(tx, answers, opts.now, opts.ttlMs);
      if (lost.length > 0) throw new KeyRace(lost);
    }
  }
  if (full > 0) {
    await appendAudit(tx, {
      at: opts.now,
      actor: opts.actor,
      action: 'execution.refused',
      subject: agent.name,
      detail: { error: 'backlog_full', batch: true, count: full },
    });
  }
  return out;
}
