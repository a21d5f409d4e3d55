import type { FastifyReply } from 'fastify';
import { BatonError } from '../domain/errors.ts';
import { membersOf, RawJson } from '../domain/json.ts';
import type { IdempotencySettings } from '../config.ts';
import type { Engine } from '../engine/engine.ts';
import type { IdemRequest, StoredAnswer } from '../engine/triggers/idempotency.ts';
import type { Tx } from '../store/adapter.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { httpStatusOf } from './errors.ts';

export type OnCreated<T = ExecutionRow> = (tx: Tx, row: T) => Promise<void>;

/** What `idempotent` runs with: the engine, and the key lifetime and in-flight wait (defaults: IDEMPOTENCY). */
export interface IdempotencyDeps {
  engine: Engine;
  idempotency?: Partial<IdempotencySettings>;
}

/** Refusals a replay repeats. 429 and 5xx are released instead: the caller should retry them. */
function storable(err: unknown): err is BatonError {
  if (!(err instanceof BatonError)) return false;
  const status = httpStatusOf(err.code);
  // group_refused: its reasons (a full backlog, a missing agent) change; a retry with the key may succeed.
  return (
    status < 500 &&
    status !== 429 &&
    err.code !== 'idempotency_in_flight' &&
    err.code !== 'idempotency_key_reused' &&
    err.code !== 'group_refused'
  );
}

/** An answer sent: a RawJson body (a replay's, or one built around stored texts) as its text. */
function send(reply: FastifyReply, answer: StoredAnswer): FastifyReply {
  reply.code(answer.status);
  if (!(answer.body instanceof RawJson)) return reply.send(answer.body);
  return reply.type('application/json; charset=utf-8').send(answer.body.text);
}

/** The `execution_id` an answer names, if any (a RawJson body's read without parsing the rest). */
function executionIdIn(body: unknown): string | null {
  const id =
    body instanceof RawJson
      ? membersOf(body.text, ['execution_id']).execution_id
      : (body as { execution_id?: unknown } | null)?.execution_id;
  return typeof id === 'string' ? id : null;
}

/**
 * Run a trigger under an optional idempotency key. `run` receives the hook to call inside the
 * transaction that creates the execution (it stores `answerFor(row)` with the row) and returns
 * the answer to send. Same key and request again: the first answer, with `Idempotent-Replay: true`.
 * What is created is an execution by default; a group (POST /v1/groups) passes `executionIdOf`
 * returning null: its stored key names no execution.
 */
export async function idempotent<T extends { id: string } = ExecutionRow>(
  { engine, idempotency }: IdempotencyDeps,
  reply: FastifyReply,
  r: IdemRequest | undefined,
  answerFor: (row: T) => StoredAnswer,
  run: (onCreated: OnCreated<T> | undefined) => Promise<StoredAnswer>,
  executionIdOf: (row: T) => string | null = (row) => row.id,
): Promise<FastifyReply> {
  if (!r) {
    return send(reply, await run(undefined));
  }
  const keys = engine.idempotency;
  const claim = await keys.claim(r, { ttlMs: idempotency?.ttlMs, waitMs: idempotency?.waitMs });
  if (claim.kind === 'replay') {
    return send(reply.header('idempotent-replay', 'true'), claim.answer);
  }
  let stored = false;
  try {
    const answer = await run(async (tx, row) => {
      await keys.complete(tx, r, answerFor(row), executionIdOf(row));
      stored = true;
    });
    if (!stored) {
      await keys.completeAlone(r, answer, executionIdIn(answer.body));
    }
    return send(reply, answer);
  } catch (err) {
    if (storable(err)) {
      const body = { error: err.code, message: err.message, ...err.details };
      await keys
        .completeAlone(r, { status: httpStatusOf(err.code), body }, (err.details.execution_id as string) ?? null)
        .catch(() => keys.release(r));
    } else {
      await keys.release(r).catch(() => {});
    }
    throw err;
  }
}
