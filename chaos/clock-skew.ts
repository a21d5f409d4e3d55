/**
 * `--clock-skew`: one server's clock two minutes fast, the other's two minutes slow, through
 * Debian's libfaketime (package `faketime`). Baton keeps time by the database's clock, so the
 * run must show what it shows with true clocks, and three things more, checked here:
 * - no live lease reaped: every lease the reaper took back belonged to a worker that was killed,
 *   or whose server was down long enough for it to lapse;
 * - no schedule fired twice or early: one execution per due time, none seen by this harness (whose
 *   clock is the database machine's) before its due time;
 * - no task run twice at once: the workers' command writes start and end marks (from the real
 *   clock) to a file, and no two runs of one execution overlap.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import type { StoreAdapter } from '../src/store/adapter.ts';
import type { Proc } from './cluster.ts';
import type { KillRecord } from './report.ts';

/** How far the servers' clocks are off: far beyond the lease TTL, the misfire grace and the canary's graces. */
export const SKEW_S = 120;

/**
 * The library is preloaded into node itself rather than started through the `faketime` wrapper:
 * the wrapper forks and waits, so a SIGKILL would reach the wrapper and leave the server running.
 * The multithreaded build, because node runs threads. The monotonic clock stays true (node's
 * timers run on it; only the wall clock is under test).
 */
const LIBFAKETIME = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1',
  '/usr/lib/faketime/libfaketimeMT.so.1',
];

/** The environment that runs a process with its wall clock `seconds` off; throws if libfaketime is not installed. */
export function skewedClockEnv(seconds: number): Record<string, string> {
  const lib = LIBFAKETIME.find((p) => existsSync(p));
  if (!lib) throw new Error('--clock-skew needs libfaketime: apt-get install faketime');
  return { LD_PRELOAD: lib, FAKETIME: `${seconds >= 0 ? '+' : ''}${seconds}s`, FAKETIME_DONT_FAKE_MONOTONIC: '1' };
}

/**
 * Whether a lease reaped at `at` (epoch ms) had a cause other than a clock: its worker was killed
 * before (the worker id is `chaos-<name>-g<generation>`, cluster.ts, and a restart is the next
 * generation), or the one server that worker talks to was down at some point from a lease TTL
 * (and a margin for the reaper's interval) before the reap (it could not renew). Kill times are
 * the harness's `t0 + at`; a kill with no record (the fleet and failing phases) counts at any time.
 */
export function lapseExplained(o: {
  procs: readonly Proc[];
  servers: ReadonlyArray<Proc & { url: string }>;
  kills: readonly KillRecord[];
  t0: number;
  leaseTtlMs: number;
}): (owner: string, at: number) => boolean {
  const margin = 5_000;
  const down = o.kills
    .filter((k) => k.kind === 'server')
    .map((k) => {
      const name = k.target.split('#')[0]!;
      const from = o.t0 + k.at;
      return { url: o.servers.find((s) => s.name === name)?.url ?? '*', from, to: k.recover_ms === null ? Infinity : from + k.recover_ms };
    });
  return (owner, at) => {
    const m = /^chaos-(.+)-g(\d+)$/.exec(owner);
    const p = m && (o.procs.find((q) => q.name === m[1]) as (Proc & { serverUrl?: () => string }) | undefined);
    if (!p) return false;
    const generation = Number(m[2]);
    const kill = o.kills.find((k) => k.target === `${p.name}#${generation}`);
    const ended = generation < p.generation || !p.alive();
    if (ended && (!kill || at >= o.t0 + kill.at)) return true;
    const url = p.serverUrl?.();
    return down.some((d) => (d.url === url || d.url === '*') && d.from <= at && at <= d.to + o.leaseTtlMs + margin);
  };
}

/** Check that node under `env` really reads a clock `seconds` off (a preload that silently does nothing proves nothing). */
export function checkSkewTakes(env: Record<string, string>, seconds: number): void {
  const before = Date.now();
  const seen = Number(
    execFileSync(process.execPath, ['-e', 'process.stdout.write(String(Date.now()))'], { env: { ...process.env, ...env } }).toString(),
  );
  const off = (seen - before) / 1000;
  if (Math.abs(off - seconds) > 10) throw new Error(`node under libfaketime read a clock ${off.toFixed(1)} s off, not ${seconds} s`);
}

/** The traffic workers' command: marks each run's start and end, by execution id and shell pid, in `marks`. */
export function markingCommand(marks: string): string[] {
  const mark = (what: string) => `echo "${what} $BATON_EXECUTION_ID $$ $(date +%s%N)" >> '${marks}'`;
  return ['/bin/sh', '-c', `${mark('s')}; cat >/dev/null; sleep 0.3; ${mark('e')}; echo '{"ok":true}'`];
}

/** Watches a schedule's executions appear, by this harness's clock (the database machine's). */
export class ScheduleWatch {
  private readonly seenAt = new Map<string, { scheduledFor: number; seenAt: number }>();
  private since = 0;

  constructor(
    private readonly store: StoreAdapter,
    private readonly scheduleId: string,
  ) {}

  /** Executions seen so far. */
  get seen(): number {
    return this.seenAt.size;
  }

  /** One look; the caller polls it often (a late look only makes an early firing look later). */
  async look(): Promise<void> {
    const now = Date.now();
    const rows = await this.store.db
      .selectFrom('executions')
      .select(['id', 'scheduled_for'])
      .where('schedule_id', '=', this.scheduleId)
      .where('scheduled_for', '>=', this.since)
      .execute();
    for (const r of rows) {
      if (this.seenAt.has(r.id) || r.scheduled_for === null) continue;
      this.seenAt.set(r.id, { scheduledFor: Number(r.scheduled_for), seenAt: now });
      this.since = Math.max(this.since, Number(r.scheduled_for) - 60_000);
    }
  }

  /** Executions seen before their due time, beyond `slackMs` (the offset measurement's error). */
  early(slackMs: number): Array<{ id: string; early_ms: number }> {
    return [...this.seenAt]
      .filter(([, s]) => s.seenAt < s.scheduledFor - slackMs)
      .map(([id, s]) => ({ id, early_ms: s.scheduledFor - s.seenAt }));
  }
}

export interface ClockSkewResult {
  servers: Array<{ name: string; skew_s: number; said: string | null }>;
  /** Leases the reaper took back from a live worker that could reach its server (lapseExplained). */
  live_leases_reaped: number;
  /** Leases taken back from a killed worker, or one whose server was down. */
  reaped_explained: number;
  schedule_fired_twice: number;
  schedule_fired_early: number;
  schedule_runs_seen: number;
  /** Executions two of whose runs overlapped (worker-side marks), and the longest overlap. */
  runs_overlapping: number;
  longest_overlap_ms: number;
  runs_marked: number;
  examples: Record<string, unknown[]>;
}

/** What the servers logged about their clock at start (up.ts logs the offset it measured). */
export function clockLine(p: Proc): string | null {
  return p.tail.find((l) => l.includes("the database's; Baton keeps time")) ?? null;
}

/**
 * Reaper events that took a lease back, each with the lease's owner (the actor of the admission
 * before it): one `explained` cannot account for reaped a live lease.
 */
async function reapedLeases(store: StoreAdapter, explained: (owner: string, at: number) => boolean) {
  const reaped = await store.db
    .selectFrom('execution_events')
    .select(['id', 'execution_id', 'reason', 'at'])
    .where('actor', 'like', 'reaper:%')
    .where('from_status', '=', 'running')
    .execute();
  const live: Array<{ execution: string; owner: string; reason: string | null; at: string }> = [];
  let fromKilled = 0;
  for (let i = 0; i < reaped.length; i += 500) {
    const chunk = reaped.slice(i, i + 500);
    const admissions = await store.db
      .selectFrom('execution_events')
      .select(['id', 'execution_id', 'actor'])
      .where(
        'execution_id',
        'in',
        chunk.map((r) => r.execution_id),
      )
      .where('to_status', '=', 'running')
      .where('from_status', '=', 'queued')
      .orderBy('id')
      .execute();
    for (const r of chunk) {
      const owner = admissions.filter((a) => a.execution_id === r.execution_id && Number(a.id) < Number(r.id)).at(-1)?.actor ?? '?';
      if (explained(owner, Number(r.at))) fromKilled++;
      else live.push({ execution: r.execution_id, owner, reason: r.reason, at: new Date(Number(r.at)).toISOString() });
    }
  }
  return { live, fromKilled };
}

/** Runs of one execution that overlapped, from the marks file. */
function overlaps(marks: string): { executions: Array<{ id: string; overlap_ms: number }>; runs: number } {
  const runs = new Map<string, Map<string, { start: number; end: number | null }>>();
  const text = existsSync(marks) ? readFileSync(marks, 'utf8') : '';
  for (const line of text.split('\n')) {
    const [what, id, pid, ns] = line.split(' ');
    if (!id || !pid || !ns) continue;
    const at = Number(BigInt(ns) / 1_000_000n);
    const byPid = runs.get(id) ?? new Map();
    runs.set(id, byPid);
    const run = byPid.get(pid) ?? { start: at, end: null };
    if (what === 's') run.start = at;
    else run.end = at;
    byPid.set(pid, run);
  }
  const out: Array<{ id: string; overlap_ms: number }> = [];
  let count = 0;
  for (const [id, byPid] of runs) {
    // A run with no end mark (its worker was killed with it) counts from its start only.
    const spans = [...byPid.values()].map((r) => ({ start: r.start, end: r.end ?? r.start })).sort((a, b) => a.start - b.start);
    count += spans.length;
    let worst = 0;
    for (let i = 1; i < spans.length; i++) {
      const prevEnd = Math.max(...spans.slice(0, i).map((s) => s.end));
      worst = Math.max(worst, prevEnd - spans[i]!.start);
    }
    if (worst > 0) out.push({ id, overlap_ms: worst });
  }
  return { executions: out, runs: count };
}

export async function checkClockSkew(o: {
  store: StoreAdapter;
  servers: Array<Proc & { skew: number }>;
  scheduleId: string | null;
  watch: ScheduleWatch | undefined;
  marks: string;
  explained: (owner: string, at: number) => boolean;
}): Promise<ClockSkewResult> {
  const { live, fromKilled } = await reapedLeases(o.store, o.explained);
  const twice = o.scheduleId
    ? await o.store.db
        .selectFrom('executions')
        .select(['scheduled_for', (eb) => eb.fn.countAll<number>().as('n')])
        .where('schedule_id', '=', o.scheduleId)
        .where('scheduled_for', 'is not', null)
        .groupBy('scheduled_for')
        .having((eb) => eb.fn.countAll(), '>', 1)
        .execute()
    : [];
  const early = o.watch?.early(500) ?? [];
  const runs = overlaps(o.marks);
  return {
    servers: o.servers.map((s) => ({ name: s.name, skew_s: s.skew, said: clockLine(s) })),
    live_leases_reaped: live.length,
    reaped_explained: fromKilled,
    schedule_fired_twice: twice.length,
    schedule_fired_early: early.length,
    schedule_runs_seen: o.watch?.seen ?? 0,
    runs_overlapping: runs.executions.length,
    longest_overlap_ms: Math.max(0, ...runs.executions.map((e) => e.overlap_ms)),
    runs_marked: runs.runs,
    examples: {
      live_leases_reaped: live.slice(0, 20),
      schedule_fired_early: early.slice(0, 20),
      runs_overlapping: runs.executions.slice(0, 20),
    },
  };
}

export function clockSkewPassed(r: ClockSkewResult): boolean {
  return (
    r.servers.every((s) => s.said !== null) &&
    r.live_leases_reaped === 0 &&
    r.schedule_fired_twice === 0 &&
    r.schedule_fired_early === 0 &&
    r.schedule_runs_seen > 0 &&
    r.runs_overlapping === 0 &&
    r.runs_marked > 0
  );
}
