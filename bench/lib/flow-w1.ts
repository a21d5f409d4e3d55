/**
 * W1 with flow limits (`npm run bench -- --only flow`), in-process and over HTTP: the same W1 in
 * four shapes on fresh databases, interleaved (plain, keys, pools, keys_pools; then again, --flow-repeat
 * times), so each limit's cost shows apart and every ratio compares runs of the same window:
 *
 * - plain: W1 as it is (no key, no pool);
 * - keys: every task keyed, ten keys per agent, key cap 1 (task i of agent i % A carries key
 *   `k<(i / A) % 10>`);
 * - pools: every agent draws from one of three pools whose seats never bind;
 * - keys_pools: keys and pools, the issue's shape.
 *
 * After each run the canary runs one full cycle on the database (bench/lib/flow.ts checkFlow).
 */
import { BatonClient } from '../../src/client.ts';
import type { Engine } from '../../src/engine/engine.ts';
import { nodeHttpTransport } from '../../src/worker/http.ts';
import type { Driver } from './drivers.ts';
import { round } from './stats.ts';
import type { W1Result } from './w1.ts';
import type { FlowCheck } from './flow.ts';

export const FLOW_SHAPES = ['plain', 'keys', 'pools', 'keys_pools'] as const;
export type FlowShape = (typeof FLOW_SHAPES)[number];
export const FLOW_POOLS = ['bench-pool-0', 'bench-pool-1', 'bench-pool-2'];
export const KEYS_PER_AGENT = 10;

const hasKeys = (s: FlowShape) => s === 'keys' || s === 'keys_pools';
const hasPools = (s: FlowShape) => s === 'pools' || s === 'keys_pools';

/** What a shape needs beyond a Driver: pools, agents with flow settings, keyed submits. */
export interface FlowAdmin {
  createPool(name: string, maxParallel: number): Promise<void>;
  createAgent(a: { name: string; max_parallel: number; max_backlog: number; key_max_parallel?: number; pools?: string[] }): Promise<void>;
  submit(agent: string, body: { message: string; payload: unknown; key?: string }): Promise<string>;
}

export function engineAdmin(engine: Engine): FlowAdmin {
  return {
    async createPool(name, maxParallel) {
      await engine.pools.create({ name, max_parallel: maxParallel }, 'bench');
    },
    async createAgent(a) {
      await engine.agents.create(a, 'bench');
    },
    async submit(agent, body) {
      return (await engine.submit(agent, body, 'bench')).id;
    },
  };
}

export function httpAdmin(url: string, key: string): FlowAdmin {
  const client = new BatonClient({ server: url, key, transport: nodeHttpTransport });
  return {
    async createPool(name, maxParallel) {
      await client.createPool({ name, max_parallel: maxParallel });
    },
    async createAgent(a) {
      await client.createAgent(a);
    },
    async submit(agent, body) {
      return (await client.submit(agent, body)).execution_id;
    },
  };
}

/** `base` with the shape's limits: its pools made first (seats far above what the agents use). */
export async function shapedDriver(admin: FlowAdmin, base: Driver, agents: number, shape: FlowShape): Promise<Driver> {
  if (shape === 'plain') return base;
  if (hasPools(shape)) for (const name of FLOW_POOLS) await admin.createPool(name, 100_000);
  let created = 0;
  return {
    ...base,
    submitMany: undefined,
    async createAgent(name, maxParallel, maxBacklog) {
      const pool = FLOW_POOLS[created++ % FLOW_POOLS.length]!;
      await admin.createAgent({
        name,
        max_parallel: maxParallel,
        max_backlog: maxBacklog,
        ...(hasKeys(shape) ? { key_max_parallel: 1 } : {}),
        ...(hasPools(shape) ? { pools: [pool] } : {}),
      });
    },
    submit: hasKeys(shape)
      ? (agent, i) => admin.submit(agent, { message: 'noop', payload: { i }, key: `k${Math.floor(i / agents) % KEYS_PER_AGENT}` })
      : base.submit,
  };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((x, y) => x - y);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const perTask = (r: FlowW1Run) =>
  (r.cpu_us_per_task === undefined ? '' : `, ${r.cpu_us_per_task} µs of CPU a task`) +
  (r.pg_cpu_us_per_task === undefined ? '' : ` (PostgreSQL's backends ${r.pg_cpu_us_per_task} µs)`) +
  (r.statements_per_task === undefined ? '' : `, ${r.statements_per_task} statements and ${r.transactions_per_task} transactions a task`);

export type FlowW1Run = W1Result & {
  check: FlowCheck;
  /** In-process: the process's CPU (user + system, every thread) per task, µs. */
  cpu_us_per_task?: number;
  /** In-process on PostgreSQL: the CPU of the backends serving the process (their /proc ticks) per task, µs. */
  pg_cpu_us_per_task?: number;
  /** In-process on PostgreSQL: statements and transactions sent per task. */
  statements_per_task?: number;
  transactions_per_task?: number;
};

export interface FlowW1Summary {
  mode: 'http' | 'inproc';
  shape: FlowShape;
  /** tasks/s of each repetition, in order. */
  runs: number[];
  /** Each repetition's tasks/s over the plain run of the same repetition. */
  ratios: number[];
  median_ratio: number;
  /** In-process: each repetition's CPU a task over the plain run's of the same repetition. */
  cpu_ratios?: number[];
  checks_ok: boolean;
}

/**
 * Runs every shape in every mode `repeat` times, interleaved (mode by mode, shapes in turn), and
 * the ratio of each to the plain run of its own repetition.
 */
export async function runFlowW1(
  modes: readonly ('http' | 'inproc')[],
  shapes: readonly FlowShape[],
  repeat: number,
  runOne: (mode: 'http' | 'inproc', shape: FlowShape) => Promise<FlowW1Run>,
  log: (line: string) => void,
): Promise<{ summaries: FlowW1Summary[]; runs: Array<{ mode: string; shape: FlowShape; rep: number; run: FlowW1Run }> }> {
  const all: Array<{ mode: string; shape: FlowShape; rep: number; run: FlowW1Run }> = [];
  const order: FlowShape[] = shapes.includes('plain') ? [...shapes] : ['plain', ...shapes];
  for (let rep = 0; rep < repeat; rep++)
    for (const mode of modes)
      for (const shape of order) {
        const run = await runOne(mode, shape);
        all.push({ mode, shape, rep, run });
        log(
          `  ${mode} ${shape} #${rep + 1}: ${run.tasks_per_s} tasks/s${perTask(run)}${run.check.ok ? '' : ` CHECK FAILED ${JSON.stringify(run.check)}`}`,
        );
      }
  const summaries: FlowW1Summary[] = [];
  for (const mode of modes)
    for (const shape of order) {
      const mine = all.filter((r) => r.mode === mode && r.shape === shape);
      const ratios = mine.map((r) => {
        const plain = all.find((p) => p.mode === mode && p.shape === 'plain' && p.rep === r.rep)!;
        return round(r.run.tasks_per_s / plain.run.tasks_per_s, 2);
      });
      const cpu = mine.map((r) => {
        const plain = all.find((p) => p.mode === mode && p.shape === 'plain' && p.rep === r.rep)!;
        return r.run.cpu_us_per_task === undefined || !plain.run.cpu_us_per_task
          ? undefined
          : round(r.run.cpu_us_per_task / plain.run.cpu_us_per_task, 2);
      });
      summaries.push({
        mode,
        shape,
        runs: mine.map((r) => r.run.tasks_per_s),
        ratios,
        ...(cpu.every((x) => x !== undefined) ? { cpu_ratios: cpu as number[] } : {}),
        median_ratio: round(median(ratios), 2),
        checks_ok: mine.every((r) => r.run.check.ok),
      });
    }
  return { summaries, runs: all };
}
