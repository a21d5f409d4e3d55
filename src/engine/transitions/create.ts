import type { SkipReason } from '../../domain/error-codes.ts';
import { executionFastComplete } from '../../domain/fast-paths.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import { preparedQuery } from '../../store/prepared-query.ts';
import type { SubmitFields } from '../../store/fast-paths.ts';
import type { ExecutionRow, NewExecution } from '../../store/schema.ts';
import type { HeldAgent } from '../agent-lock.ts';
import { backlogOf } from '../backlog.ts';
import { assignRounds } from '../flow-keys.ts';
import { appendAudit, appendAudits, AUDIT_COLUMNS, auditRow, type AuditEntry } from '../audit.ts';
import { stamp } from './stamp.ts';

export type NewQueued = Omit<
  NewExecution,
  'status' | 'attempt' | 'queued_at' | 'created_at' | 'changed_at' | 'changed_by' | 'change_reason'
>;

/** A queued row's full values (create → queued), for createExecutions. */
export function queuedValues(row: NewQueued, now: number, actor: string) {
  // Object.assign rather than `{ ...row, more }`: V8 builds a spread-then-extended object of
  // this size about ten times slower (the scheduler makes thousands at once).
  return Object.assign({}, row, { status: 'queued' as const, attempt: 0, created_at: now, queued_at: now }, stamp(now, actor, 'created'));
}

/**
 * A skipped row's full values (create → skipped): a tick that started nothing leaves a terminal
 * record of why (`error_code`: already_running | backlog_full | missed). The unique
 * (schedule_id, scheduled_for) index makes it one row per due time, like a real run.
 */
export function skippedValues(row: NewQueued, code: SkipReason, message: string, now: number, actor: string): NewExecution {
  return Object.assign(
    {},
    row,
    {
      status: 'skipped' as const,
      attempt: 0,
      created_at: now,
      queued_at: null,
      completed_at: now,
      error_code: code,
      error_message: message,
    },
    stamp(now, actor, code),
  );
}

/**
 * How a creation respects the agent's backlog (max_backlog queued executions):
 * - `check`: one queued row, created only while `agent` has room; the backlog read and the insert are
 *   one statement (a submit, a manual or webhook trigger, a manual retry, a chained task, a
 *   group's join).
 * - `counted`: many rows for the `agents` given, which the caller counted room for under the
 *   same hold and passes only what fits, plus `skipped` records (a scheduler batch, a batch
 *   submit, a group's members).
 * - `exempt`: one queued row, not counted: a policy retry stands in for work already counted
 *   and is written in the failure's transaction, which holds no new-work turn.
 *
 * The new-work turn is the caller's to take (lockAgentsForNewWork, whose rows are HeldAgent):
 * the caller's own checks (overlap, idempotency keys, a batch's room) must see the same hold,
 * and a caller that creates for several agents (the scheduler, a group) takes them all at once
 * in name order, so creators never wait on each other in a cycle.
 */
export type Backlog = { backlog: 'check'; agent: HeldAgent } | { backlog: 'counted'; agents: readonly HeldAgent[] } | { backlog: 'exempt' };

/** The audit of a creation: one entry per execution, or one for the whole batch (null: none). */
export type CreateAudit<R> = { each: (row: R, index: number) => AuditEntry } | { batch: AuditEntry | null };

/** One row (`check` or `exempt`): its full values (queuedValues, or a retry's), and its audit from those values. */
export type CreateOne = { row: NewExecution; audit: CreateAudit<NewExecution> };
/** Many rows (`counted`): full values (queuedValues, skippedValues), audited from those values. */
export type CreateMany = { rows: readonly NewExecution[]; audit: CreateAudit<NewExecution> };

/**
 * The only code that inserts into `executions` (test/engine/status-writers.test.ts enforces it): every
 * new execution — submitted, triggered, scheduled, retried, chained, a group's member or join —
 * is created here, queued (or, by the scheduler, skipped), with its audit in the same
 * transaction. `check` returns the row, or undefined when the backlog is full (nothing written;
 * the caller audits the refusal); `exempt` returns the row; `counted` writes its rows in bulk
 * statements without reading them back (the scheduler's hot path).
 */
export function createExecutions(
  tx: Tx,
  store: StoreAdapter,
  req: CreateOne & { backlog: 'check'; agent: HeldAgent },
): Promise<ExecutionRow | undefined>;
export function createExecutions(tx: Tx, store: StoreAdapter, req: CreateOne & { backlog: 'exempt' }): Promise<ExecutionRow>;
export function createExecutions(
  tx: Tx,
  store: StoreAdapter,
  req: CreateMany & { backlog: 'counted'; agents: readonly HeldAgent[] },
): Promise<void>;
export async function createExecutions(
  tx: Tx,
  store: StoreAdapter,
  req: (CreateOne | CreateMany) & Backlog,
): Promise<ExecutionRow | undefined | void> {
  if (req.backlog === 'counted') {
    // The caller counted the room: every queued keyed row takes its round.
    const rows = (await assignRounds(tx, store, (req as CreateMany).rows))!;
    const held = new Set(req.agents.map((a) => a.name));
    for (const r of rows) {
      if (r.status !== 'queued' && r.status !== 'skipped')
        throw new Error(`a new execution starts queued or skipped, not ${r.status} (${r.id})`);
      if (!held.has(r.agent)) throw new Error(`agent '${r.agent}' is not held for new work (execution ${r.id})`);
    }
    if (rows.length === 0) return;
    await store.insertMany(
      tx,
      'executions',
      (rows as NewExecution[]).map((r) => withFacts(r, true)),
    );
    await audit(tx, store, req.audit as CreateAudit<NewExecution>, rows);
    return;
  }
  const check = req.backlog === 'check' ? req.agent : undefined;
  // A keyed row takes its fairness round (src/domain/flow.ts); with `check`, only while the backlog
  // has room (the same read as the insert's, under the same turn), so a refused row takes none.
  const one = (req as CreateOne).row;
  const keyed = one.flow_key == null ? [one] : await assignRounds(tx, store, [one], check !== undefined);
  if (!keyed) return undefined;
  const values = withFacts(keyed[0]!);
  if (values.status !== 'queued') throw new Error(`a new execution starts queued, not ${values.status} (${values.id})`);
  if (check && values.agent !== check.name) throw new Error(`agent '${values.agent}' is not held for new work (execution ${values.id})`);
  // The statement's shape (preparedQuery): the backlog rule and the columns given.
  const shape = `${check ? 'check' : 'exempt'}:${Object.keys(values).join(',')}`;
  const params = Object.assign({}, values, { $agent: check?.name ?? '', $max_backlog: check?.max_backlog ?? 0 });
  const how = req.audit as CreateAudit<NewExecution>;
  const entry = 'batch' in how ? how.batch : how.each(values, 0);
  let row: ExecutionRow | undefined;
  if (store.cteWrites && entry) {
    // PostgreSQL: the audit row rides the insert's statement (a data-modifying CTE over the row
    // inserted, so a refusal writes neither): one round trip fewer per submit.
    const audited = auditRow(entry);
    row = await tx
      .with('created', () => oneRowInsert(tx, params, shape))
      .with('audited', (db) =>
        db
          .insertInto('audit_log')
          .columns(AUDIT_COLUMNS)
          .expression((eb) => eb.selectFrom('created').select((e) => AUDIT_COLUMNS.map((c) => e.val(audited[c]).as(c)))),
      )
      .selectFrom('created')
      .selectAll()
      .executeTakeFirst();
  } else {
    [row] = await insertOne(tx, params, shape);
    if (row && entry) await appendAudit(tx, entry);
  }
  if (!row && !check) throw new Error(`execution ${values.id} was not inserted`);
  return row;
}

/**
 * createExecutions' insert of one row (its statement, built once per shape: preparedQuery):
 * `check:` or `exempt:` and the row's columns. With `check`, the row is inserted only while
 * `$agent` has fewer than `$max_backlog` queued rows (the backlog counters read and the row
 * inserted in one statement).
 */
function oneRowInsert(tx: Tx, p: NewExecution & { $agent: string; $max_backlog: number }, shape: string) {
  const [how, list] = shape.split(':') as [string, string];
  const columns = list.split(',') as Array<keyof NewExecution>;
  let select = tx.selectNoFrom((eb) => columns.map((c) => eb.val(p[c] as any).as(c)));
  if (how === 'check') {
    select = select.where((eb) => backlogOf(eb, p.$agent), '<', p.$max_backlog);
  }
  return tx.insertInto('executions').columns(columns).expression(select).returningAll();
}
const insertOne = preparedQuery(oneRowInsert);

export type { SubmitFields };

/**
 * A new row with its fast-path fact (src/domain/fast-paths.ts): whether its completion may skip the
 * engine's transaction. A lone row gets it only where it is not the column's default (1), so most
 * keep their statement's shape; rows inserted together all get it (a key some rows lack would be
 * NULL in theirs: StoreAdapter.insertMany).
 */
function withFacts<R extends NewExecution>(row: R, always = false): R {
  const fast = executionFastComplete({ group_id: row.group_id ?? null });
  return fast === 1 && !always ? row : Object.assign({}, row, { fast_complete: fast });
}

async function audit<R>(tx: Tx, store: StoreAdapter, how: CreateAudit<R>, rows: readonly R[]): Promise<void> {
  if ('batch' in how) {
    if (how.batch) await appendAudit(tx, how.batch);
  } else if (rows.length === 1) {
    await appendAudit(tx, how.each(rows[0]!, 0));
  } else {
    await appendAudits(store, tx, rows.map(how.each));
  }
}
