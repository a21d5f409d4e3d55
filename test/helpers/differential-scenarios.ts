import fc from 'fast-check';
import type { BreakerConfig } from '../../src/domain/breaker.ts';
import type { Budget } from '../../src/domain/budget.ts';
import { SUBSCRIPTION_ON, type SubscriptionOn } from '../../src/domain/chains.ts';
import type { GroupPolicy } from '../../src/domain/groups.ts';
import type { RetryPolicy } from '../../src/domain/retry.ts';
import type { CompletionStatus } from '../../src/domain/states.ts';
import type { Throttle } from '../../src/domain/throttle.ts';

// What the differential harness (differential.ts) runs: random agent configurations and
// sequences of engine operations.

// ── scenarios ────────────────────────────────────────────────────────────────

export interface AgentSpec {
  max_parallel: number;
  max_backlog: number;
  max_redeliveries: number;
  timeout_seconds: number;
  push: boolean;
  retry_policy: RetryPolicy | null;
  breaker: BreakerConfig | null;
  budget: Budget | null;
  paused: boolean;
  /** Per-key cap (src/domain/flow.ts): such an agent leaves the fast claim path. */
  key_cap?: number | null;
  /** Per-key throttle (src/domain/flow.ts). */
  key_throttle?: Throttle | null;
  /** Its own throttle (src/domain/throttle.ts). */
  throttle?: Throttle | null;
  /** The scenario's pools it draws from (indexes, modulo their number). */
  pools?: number[];
}

/** A pool (src/domain/pools.ts): seats, a throttle and a budget shared by the agents that draw from it. */
export interface PoolSpec {
  max_parallel: number | null;
  throttle: Throttle | null;
  budget: Budget | null;
}

/**
 * Which execution an operation aims at: the i-th of the running ones (none: the operation is
 * skipped), of the live ones (queued or running; all when none is) or of all, in order of first
 * appearance.
 */
export interface Target {
  i: number;
  pool: 'running' | 'live' | 'any';
}

export type Op =
  | { k: 'submit'; agent: number; priority: number; runAfter: number | null; key: number | null; flowKey?: number | null }
  | { k: 'submitBatch'; agent: number; keys: number[] }
  | { k: 'claim'; agent: number; max: number; push: boolean }
  | { k: 'heartbeat'; ex: Target; token: number }
  | { k: 'complete'; ex: Target; token: number; status: CompletionStatus; cost: number | null }
  | { k: 'release'; ex: Target; token: number }
  | { k: 'cancel'; ex: Target }
  | { k: 'retry'; ex: Target }
  | { k: 'advance'; ms: number }
  | { k: 'reap' }
  | { k: 'pause'; agent: number }
  | { k: 'resume'; agent: number }
  | { k: 'closeBreaker'; agent: number }
  | { k: 'subscribe'; source: number; target: number; on: SubscriptionOn; enabled: boolean }
  | { k: 'toggleSubscription'; sub: number; enabled: boolean }
  | { k: 'group'; members: number[]; policy: GroupPolicy; join: number | null }
  | { k: 'edit'; agent: number; patch: Edit }
  | { k: 'delete'; agent: number }
  | { k: 'join'; agent: number; pools: number[] }
  | { k: 'editPool'; pool: number; patch: Partial<PoolSpec> }
  | { k: 'deletePool'; pool: number }
  | { k: 'why'; ex: Target };

export interface Edit {
  max_parallel?: number;
  max_backlog?: number;
  budget?: Budget | null;
  breaker?: BreakerConfig | null;
  retry_policy?: RetryPolicy | null;
  throttle?: Throttle | null;
  key_throttle?: Throttle | null;
}

export interface Scenario {
  agents: AgentSpec[];
  /** Pools, made before the agents (none when absent). */
  pools?: PoolSpec[];
  ops: Op[];
}

export const LEASE_S = 10;
const budgetArb: fc.Arbitrary<Budget> = fc
  .constantFrom(1, 2)
  .map((limit) => ({ limits: [{ metric: 'cost_usd' as const, window: 'hour' as const, limit }] }));
const breakerArb: fc.Arbitrary<BreakerConfig> = fc.record({
  consecutive: fc.integer({ min: 1, max: 3 }),
  ratio: fc.constant(1),
  window: fc.integer({ min: 2, max: 4 }),
  cooldown_ms: fc.constant(5_000),
  max_cooldown_ms: fc.constant(20_000),
  count: fc.constant(['agent_error', 'timeout', 'poisoned'] as BreakerConfig['count']),
});
// No jitter: a retry's wait is then the same on every path.
const retryArb: fc.Arbitrary<RetryPolicy> = fc.record({
  max_attempts: fc.integer({ min: 2, max: 3 }),
  base_seconds: fc.constantFrom(0, 5),
  factor: fc.constant(1),
  max_seconds: fc.constant(60),
  jitter: fc.constant(0),
});
/** `arb` one time in `1 + nulls`, else null: mostly plain agents (the fast paths' ground). */
const maybe = <T>(arb: fc.Arbitrary<T>, nulls: number) =>
  fc.oneof({ weight: nulls, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: arb });
// Periods the clock's steps (advance) cross in one or a few operations.
const throttleArb: fc.Arbitrary<Throttle> = fc.record({
  limit: fc.integer({ min: 1, max: 2 }),
  period_seconds: fc.constantFrom(10, 60),
  burst: fc.integer({ min: 0, max: 1 }),
});
// Minute windows: each costed completion spends 10 tokens and 0.5 or 1 dollar (complete's usage).
const poolBudgetArb: fc.Arbitrary<Budget> = fc.oneof(
  fc.constantFrom(10, 20).map((limit) => ({ limits: [{ metric: 'total_tokens' as const, window: 'minute' as const, limit }] })),
  fc.constantFrom(1, 2).map((limit) => ({ limits: [{ metric: 'cost_usd' as const, window: 'minute' as const, limit }] })),
);
export const poolArb: fc.Arbitrary<PoolSpec> = fc.record({
  max_parallel: fc.option(fc.integer({ min: 1, max: 3 }), { nil: null, freq: 3 }),
  throttle: maybe(throttleArb, 2),
  budget: maybe(poolBudgetArb, 2),
});
const poolIx = fc.nat({ max: 1 });

export const agentArb: fc.Arbitrary<AgentSpec> = fc.record({
  max_parallel: fc.integer({ min: 1, max: 3 }),
  max_backlog: fc.integer({ min: 2, max: 5 }),
  max_redeliveries: fc.integer({ min: 0, max: 2 }),
  timeout_seconds: fc.constantFrom(45, 150),
  push: fc.constantFrom(false, false, false, false, false, false, false, true),
  retry_policy: maybe(retryArb, 2),
  breaker: maybe(breakerArb, 3),
  budget: maybe(budgetArb, 4),
  paused: fc.constantFrom(false, false, false, false, false, true),
  key_cap: maybe(fc.integer({ min: 1, max: 2 }), 2),
  key_throttle: maybe(throttleArb, 5),
  throttle: maybe(throttleArb, 4),
  pools: fc.oneof({ weight: 1, arbitrary: fc.constant<number[]>([]) }, { weight: 2, arbitrary: fc.uniqueArray(poolIx, { maxLength: 2 }) }),
});

const target: fc.Arbitrary<Target> = fc.record({ i: fc.nat({ max: 20 }), pool: fc.constantFrom('running', 'live', 'any') });
/** Lease operations aim mostly at running executions. */
const leased: fc.Arbitrary<Target> = fc.record({
  i: fc.nat({ max: 20 }),
  pool: fc.constantFrom<Target['pool']>('running', 'running', 'running', 'running', 'live', 'any'),
});
const agentIx = fc.nat({ max: 3 });
const token = fc.nat({ max: 3 });
const op = <K extends Op['k']>(k: K, fields: { [F in keyof Extract<Op, { k: K }>]?: fc.Arbitrary<unknown> }) =>
  fc.record({ k: fc.constant(k), ...fields } as Record<string, fc.Arbitrary<unknown>>) as unknown as fc.Arbitrary<Extract<Op, { k: K }>>;

export const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 8,
    arbitrary: op('submit', {
      agent: agentIx,
      priority: fc.nat({ max: 1 }),
      runAfter: fc.constantFrom(null, null, null, 0, 5_000),
      key: fc.option(fc.nat({ max: 2 }), { nil: null, freq: 4 }),
      flowKey: fc.option(fc.nat({ max: 2 }), { nil: null, freq: 2 }),
    }),
  },
  { weight: 1, arbitrary: op('submitBatch', { agent: agentIx, keys: fc.array(fc.nat({ max: 3 }), { minLength: 1, maxLength: 3 }) }) },
  {
    weight: 9,
    arbitrary: op('claim', {
      agent: agentIx,
      max: fc.integer({ min: 1, max: 3 }),
      push: fc.constantFrom(false, false, false, false, false, false, true),
    }),
  },
  { weight: 2, arbitrary: op('heartbeat', { ex: leased, token }) },
  {
    weight: 9,
    arbitrary: op('complete', {
      ex: leased,
      token,
      status: fc.constantFrom<CompletionStatus>('succeeded', 'succeeded', 'failed', 'failed', 'cancelled'),
      cost: fc.constantFrom(null, 0.5, 1),
    }),
  },
  { weight: 1, arbitrary: op('release', { ex: leased, token }) },
  { weight: 1, arbitrary: op('cancel', { ex: target }) },
  { weight: 1, arbitrary: op('retry', { ex: fc.record({ i: fc.nat({ max: 20 }), pool: fc.constant('any' as const) }) }) },
  {
    weight: 3,
    arbitrary: op('advance', { ms: fc.constantFrom(1_000, 1_000, 6_000, 6_000, 11_000, 11_000, 16_000, 40_000, 95_000, 3_600_000) }),
  },
  { weight: 3, arbitrary: fc.constant({ k: 'reap' as const }) },
  { weight: 1, arbitrary: op('pause', { agent: agentIx }) },
  { weight: 1, arbitrary: op('resume', { agent: agentIx }) },
  { weight: 1, arbitrary: op('closeBreaker', { agent: agentIx }) },
  {
    weight: 1,
    arbitrary: op('subscribe', { source: agentIx, target: agentIx, on: fc.constantFrom(...SUBSCRIPTION_ON), enabled: fc.boolean() }),
  },
  { weight: 1, arbitrary: op('toggleSubscription', { sub: fc.nat({ max: 3 }), enabled: fc.boolean() }) },
  {
    weight: 1,
    arbitrary: op('group', {
      members: fc.array(agentIx, { minLength: 1, maxLength: 3 }),
      policy: fc.constantFrom<GroupPolicy>('all', 'all_succeeded', 'first_succeeded', 'quorum'),
      join: fc.option(agentIx, { nil: null, freq: 3 }),
    }),
  },
  {
    weight: 1,
    arbitrary: op('edit', {
      agent: agentIx,
      patch: fc.record(
        {
          max_parallel: fc.integer({ min: 0, max: 3 }),
          max_backlog: fc.integer({ min: 1, max: 5 }),
          budget: maybe(budgetArb, 1),
          breaker: maybe(breakerArb, 1),
          retry_policy: maybe(retryArb, 1),
          throttle: maybe(throttleArb, 1),
          key_throttle: maybe(throttleArb, 1),
        },
        { requiredKeys: [] },
      ),
    }),
  },
  { weight: 1, arbitrary: op('delete', { agent: agentIx }) },
  { weight: 2, arbitrary: op('join', { agent: agentIx, pools: fc.uniqueArray(poolIx, { maxLength: 2 }) }) },
  {
    weight: 1,
    arbitrary: op('editPool', {
      pool: poolIx,
      patch: fc.record(
        {
          max_parallel: fc.option(fc.integer({ min: 0, max: 3 }), { nil: null, freq: 3 }),
          throttle: maybe(throttleArb, 1),
          budget: maybe(poolBudgetArb, 1),
        },
        { requiredKeys: [] },
      ),
    }),
  },
  { weight: 1, arbitrary: op('deletePool', { pool: poolIx }) },
  // Why a queued task waits (the flow limits' answers among them): aimed at live executions.
  { weight: 3, arbitrary: op('why', { ex: fc.record({ i: fc.nat({ max: 20 }), pool: fc.constant('live' as const) }) }) },
);

export const scenarioArb = (opts: { minOps?: number; maxOps?: number } = {}): fc.Arbitrary<Scenario> =>
  fc.record({
    agents: fc.array(agentArb, { minLength: 2, maxLength: 4 }),
    pools: fc.array(poolArb, { minLength: 1, maxLength: 2 }),
    ops: fc.array(opArb, { minLength: opts.minOps ?? 20, maxLength: opts.maxOps ?? 50, size: 'max' }),
  });
