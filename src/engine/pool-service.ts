import type { Budget, LimitStatus } from '../domain/budget.ts';
import { AlreadyExists, BatonError, NotFound } from '../domain/errors.ts';
import { nextStartAt, parseThrottle, type Throttle } from '../domain/throttle.ts';
import type { PoolRow } from '../store/schema.ts';
import type { Tx } from '../store/adapter.ts';
import { appendAudit } from './audit.ts';
import type { EngineContext } from './context.ts';
import { refreshFastPathFacts } from './fast-path-facts.ts';
import { poolBudgetStatus } from './pool-budget.ts';
import { poolSeatsInUse } from './pools.ts';

export interface PoolInput {
  name: string;
  description?: string | null;
  /** Seats shared by its agents' running tasks; null: no seat limit. */
  max_parallel?: number | null;
  throttle?: Throttle | null;
  budget?: Budget | null;
}
export type PoolPatch = Partial<Omit<PoolInput, 'name'>>;

/** A pool now: its settings, who draws from it, its seats in use, its throttle and budget state. */
export interface PoolUsage {
  pool: PoolRow;
  agents: string[];
  in_use: number;
  throttle_next_admit_at: number | null;
  budget_limits: LimitStatus[];
}

/** At most this many agents are named in a refusal to delete a pool (the count covers the rest). */
const NAMED_IN_REFUSAL = 20;

const json = <T>(v: T | null | undefined) => (v === undefined ? undefined : v === null ? null : JSON.stringify(v));

/**
 * Pools (src/domain/pools.ts): create, change, delete, read (engine.pools). A pool's row is only
 * ever locked after an agent's (admission) or alone (here): nothing locks a pool and then an agent.
 */
export class Pools {
  constructor(private readonly engine: EngineContext) {}

  private get store() {
    return this.engine.store;
  }

  async create(input: PoolInput, actor: string): Promise<PoolRow> {
    const now = this.engine.now();
    return this.store.transaction(async (tx) => {
      const exists = await tx.selectFrom('pools').select('name').where('name', '=', input.name).executeTakeFirst();
      if (exists) throw new AlreadyExists('pool', input.name);
      const row = await tx
        .insertInto('pools')
        .values({
          name: input.name,
          description: input.description ?? null,
          max_parallel: input.max_parallel ?? null,
          throttle: json(input.throttle) ?? null,
          budget: json(input.budget) ?? null,
          created_at: now,
          updated_at: now,
        })
        // Made meanwhile by a concurrent create (the read above saw none): the same 409, not a key error.
        .onConflict((oc) => oc.column('name').doNothing())
        .returningAll()
        .executeTakeFirst();
      if (!row) throw new AlreadyExists('pool', input.name);
      await appendAudit(tx, { at: now, actor, action: 'pool.create', subject: input.name });
      return row;
    });
  }

  /** Raising a limit admits at once: the agents that draw from it are signalled. */
  async update(name: string, patch: PoolPatch, actor: string): Promise<PoolRow> {
    const now = this.engine.now();
    const out = await this.store.transaction(async (tx) => {
      if (patch.budget !== undefined) await this.lockForBudget(tx, name);
      const row = await tx
        .updateTable('pools')
        .set({
          description: patch.description,
          max_parallel: patch.max_parallel,
          throttle: json(patch.throttle),
          // A throttle removed forgets its state; a changed one keeps it (no burst by editing it).
          ...(patch.throttle === null ? { throttle_tat: null } : {}),
          budget: json(patch.budget),
          updated_at: now,
        })
        .where('name', '=', name)
        .returningAll()
        .executeTakeFirst();
      if (!row) throw new NotFound('pool', name);
      if (patch.budget !== undefined)
        for (const agent of await this.members(tx, name, Number.MAX_SAFE_INTEGER))
          await refreshFastPathFacts(tx, agent, { lock: this.store });
      await appendAudit(tx, { at: now, actor, action: 'pool.update', subject: name, detail: { fields: Object.keys(patch) } });
      return { row, agents: await this.members(tx, name) };
    });
    for (const a of out.agents) this.store.publish('agent', a);
    return out.row;
  }

  /** Refused (409 pool_in_use, naming them) while agents draw from it. Its spending goes with it. */
  async delete(name: string, actor: string): Promise<void> {
    const now = this.engine.now();
    await this.store.transaction(async (tx) => {
      // Locked first: an agent joining it meanwhile either committed (and is seen below) or then
      // finds no pool (writeAgentPools holds the pools it joins against deletion).
      const row = await this.store.lockRows(tx.selectFrom('pools').select('name').where('name', '=', name), 'wait').executeTakeFirst();
      if (!row) throw new NotFound('pool', name);
      const agents = await this.members(tx, name, NAMED_IN_REFUSAL + 1);
      if (agents.length > 0) {
        const named = agents.slice(0, NAMED_IN_REFUSAL);
        const more = agents.length > NAMED_IN_REFUSAL ? ' and more' : '';
        throw new BatonError(
          'pool_in_use',
          `pool '${name}' is drawn from by ${named.map((a) => `'${a}'`).join(', ')}${more}; remove it from their pools first`,
          {
            pool: name,
            agents: named,
          },
        );
      }
      await tx.deleteFrom('pool_budget_ledger').where('pool', '=', name).execute();
      await tx.deleteFrom('pools').where('name', '=', name).execute();
      await appendAudit(tx, { at: now, actor, action: 'pool.delete', subject: name });
    });
  }

  /** Every pool, in name order (pools are few: configuration, not data). */
  list(): Promise<PoolRow[]> {
    return this.store.db.selectFrom('pools').selectAll().orderBy('name').limit(1000).execute();
  }

  async get(name: string): Promise<PoolUsage> {
    const db = this.store.db;
    const pool = await db.selectFrom('pools').selectAll().where('name', '=', name).executeTakeFirst();
    if (!pool) throw new NotFound('pool', name);
    const now = this.engine.now();
    const t = parseThrottle(pool.throttle);
    return {
      pool,
      agents: await this.members(db, name),
      in_use: await poolSeatsInUse(db, name),
      throttle_next_admit_at: t && nextStartAt(t, pool.throttle_tat === null ? null : Number(pool.throttle_tat), now),
      budget_limits: await poolBudgetStatus(db, pool, now),
    };
  }

  /** Seats in use and caps of every pool, for /metrics. */
  async gauges(): Promise<Array<{ name: string; max_parallel: number | null; in_use: number }>> {
    const out = [];
    for (const p of await this.list())
      out.push({ name: p.name, max_parallel: p.max_parallel, in_use: await poolSeatsInUse(this.store.db, p.name) });
    return out;
  }

  /**
   * Before a budget change, whose members' fast-path facts follow it (a budgeted pool's completions
   * spend it): the members' rows first, in name order, as admission locks an agent before its
   * pools; then the pool's row so that no agent joins meanwhile (its key-share lock waits, and its
   * facts, computed after, see the new budget). An agent that joined between the two reads is
   * locked after the pool: a rare wait that PostgreSQL may break as a deadlock, which is retried.
   */
  private async lockForBudget(tx: Tx, pool: string): Promise<void> {
    const agents = await this.members(tx, pool, Number.MAX_SAFE_INTEGER);
    if (agents.length > 0)
      await this.store.lockRows(tx.selectFrom('agents').select('name').where('name', 'in', agents).orderBy('name'), 'admission').execute();
    await this.store.lockRows(tx.selectFrom('pools').select('name').where('name', '=', pool), 'wait').execute();
  }

  private async members(db: Pick<EngineContext['store'], 'db'>['db'], pool: string, limit = 1000): Promise<string[]> {
    const rows = await db.selectFrom('agent_pools').select('agent').where('pool', '=', pool).orderBy('agent').limit(limit).execute();
    return rows.map((r) => r.agent);
  }
}
