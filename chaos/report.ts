/** After the run settles: what the database says happened, written as JSON and Markdown. */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { replayAllSeats } from '../src/canary/invariants/history.ts';
import { TERMINAL_STATES } from '../src/domain/states.ts';
import type { StoreAdapter } from '../src/store/adapter.ts';
import type { ChainResult } from './chains.ts';
import type { ClockSkewResult } from './clock-skew.ts';
import type { FailingAgentResult } from './failing.ts';
import type { FailoverResult } from './failover.ts';
import type { FleetKillResult } from './fleet.ts';
import { netCutLine, type NetCutResult } from './net-cut.ts';
import type { TrafficStats } from './traffic.ts';

export interface KillRecord {
  at: number;
  target: string;
  kind: 'server' | 'worker';
  /** Executions the killed worker held (running under its lease owner). */
  held: number;
  /** Kill → every held execution terminal or running under another owner (workers), or the restarted server ready (servers). */
  recover_ms: number | null;
}

export interface ChaosReport {
  mode: 'quick' | 'full' | 'custom';
  started_at: string;
  duration_s: number;
  settle_s: number;
  config: Record<string, unknown>;
  /** The four numbers that must be zero. */
  lost: number;
  duplicate_terminal_outcomes: number;
  over_admissions: number;
  canary_violations_after_settle: number;
  /** Flow control in the load (chaos/flow.ts): keyed submits, and F-01/F-02 open after settle (must be 0). */
  flow: { pool: string; keyed_submits: number; keyed_tasks: number; debounced_submits: number; f01_f02_open: number };
  /** Also checked, reported, not part of the exit code: one execution per idempotency key. */
  idempotency_duplicates: number;
  details: {
    acknowledged: number;
    /** How many acknowledged ids are missing (the list above is the first 50). */
    acknowledged_missing_count: number;
    acknowledged_missing: string[];
    not_terminal: Array<{ id: string; status: string }>;
    duplicate_terminal: string[];
    over_admitted: Array<{ subject: string; reason: string }>;
    canary_open: Array<{ invariant: string; subject: string; reason: string }>;
    statuses: Record<string, number>;
    by_trigger: Record<string, number>;
    refused: Record<string, number>;
    requests_retried: number;
    units_given_up: number;
    cancels_requested: number;
    replays_checked: number;
  };
  kills: KillRecord[];
  recover: {
    worker_p50_ms: number | null;
    worker_p99_ms: number | null;
    server_p50_ms: number | null;
    server_p99_ms: number | null;
    target_p99_ms: number;
  };
  throughput_per_s: number;
  /** The fleet-kill phase (chaos/fleet.ts): passes with held >= 2, charged 0, finished = held. */
  fleet_kill?: FleetKillResult;
  failing_agent?: FailingAgentResult;
  /** The chain phase (chaos/chains.ts): passes with missing, duplicated and orphans all 0. */
  chain?: ChainResult;
  /** --clock-skew (chaos/clock-skew.ts): passes with every count 0 and both servers' offsets measured. */
  clock_skew?: ClockSkewResult;
  /** --pg-failover (chaos/failover.ts): the primary killed, the standby promoted, the checks above read from it. */
  failover?: FailoverResult;
  /** --net-cut (chaos/net-cut.ts): passes with every cut done, a re-run after one, nothing over the bound. */
  net_cut?: NetCutResult;
  passed: boolean;
  not_exercised: string[];
}

export function percentile(xs: number[], p: number): number | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}

export async function analyse(
  store: StoreAdapter,
  traffic: TrafficStats,
): Promise<
  Omit<
    ChaosReport,
    | 'mode'
    | 'started_at'
    | 'duration_s'
    | 'settle_s'
    | 'config'
    | 'canary_violations_after_settle'
    | 'flow'
    | 'kills'
    | 'recover'
    | 'throughput_per_s'
    | 'passed'
    | 'not_exercised'
    | 'details'
  > & { details: Omit<ChaosReport['details'], 'canary_open'> }
> {
  const db = store.db;
  const statuses = Object.fromEntries(
    (
      await db
        .selectFrom('executions')
        .select(['status', (eb) => eb.fn.countAll<number>().as('n')])
        .groupBy('status')
        .execute()
    ).map((r) => [r.status, Number(r.n)]),
  );
  const byTrigger = Object.fromEntries(
    (
      await db
        .selectFrom('executions')
        .select(['trigger_kind', (eb) => eb.fn.countAll<number>().as('n')])
        .groupBy('trigger_kind')
        .execute()
    ).map((r) => [r.trigger_kind, Number(r.n)]),
  );
  const notTerminal = await db
    .selectFrom('executions')
    .select(['id', 'status'])
    .where('status', 'not in', [...TERMINAL_STATES])
    .limit(100)
    .execute();
  const notTerminalCount = Number(
    (
      await db
        .selectFrom('executions')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('status', 'not in', [...TERMINAL_STATES])
        .executeTakeFirstOrThrow()
    ).n,
  );

  const acked = [...traffic.acknowledged.keys()];
  const found = new Set<string>();
  for (let i = 0; i < acked.length; i += 500) {
    const rows = await db
      .selectFrom('executions')
      .select('id')
      .where('id', 'in', acked.slice(i, i + 500))
      .execute();
    for (const r of rows) found.add(r.id);
  }
  const missing = acked.filter((id) => !found.has(id));

  const dupTerminal = await db
    .selectFrom('execution_events')
    .select(['execution_id', (eb) => eb.fn.countAll<number>().as('n')])
    .where('to_status', 'in', [...TERMINAL_STATES])
    .groupBy('execution_id')
    .having((eb) => eb.fn.countAll(), '>', 1)
    .execute();

  const over = await store.snapshot((tx) => replayAllSeats(tx));

  const dbDupKeys = await db
    .selectFrom('executions')
    .select(['agent', 'idempotency_key', (eb) => eb.fn.countAll<number>().as('n')])
    .where('idempotency_key', 'is not', null)
    .groupBy(['agent', 'idempotency_key'])
    .having((eb) => eb.fn.countAll(), '>', 1)
    .execute();
  const answeredTwice = [...traffic.answersByKey.values()].filter((s) => s.size > 1).length;

  return {
    lost: missing.length + notTerminalCount,
    duplicate_terminal_outcomes: dupTerminal.length,
    over_admissions: over.length,
    idempotency_duplicates: dbDupKeys.length + answeredTwice,
    details: {
      acknowledged: acked.length,
      acknowledged_missing_count: missing.length,
      acknowledged_missing: missing.slice(0, 50),
      not_terminal: notTerminal,
      duplicate_terminal: dupTerminal.slice(0, 50).map((r) => r.execution_id),
      over_admitted: over.slice(0, 50).map((f) => ({ subject: f.subject, reason: f.reason })),
      statuses,
      by_trigger: byTrigger,
      refused: traffic.refused,
      requests_retried: traffic.retriedRequests,
      units_given_up: traffic.gaveUp,
      cancels_requested: traffic.cancelsRequested,
      replays_checked: traffic.replaysChecked,
    },
  };
}

const RESULTS = fileURLToPath(new URL('../bench/results/', import.meta.url));

export function writeReport(r: ChaosReport): { json: string; md: string } {
  mkdirSync(RESULTS, { recursive: true });
  const stamp = r.started_at.replace(/[:.]/g, '-');
  const json = `${RESULTS}chaos-${r.mode}-${stamp}.json`;
  const md = `${RESULTS}chaos-${r.mode}-${stamp}.md`;
  writeFileSync(json, JSON.stringify(r, null, 2) + '\n');
  writeFileSync(md, markdown(r));
  return { json, md };
}

const ms = (v: number | null) => (v === null ? 'n/a' : `${(v / 1000).toFixed(1)} s`);

export function markdown(r: ChaosReport): string {
  const c = r.config as Record<string, any>;
  const lines = [
    `# Chaos run (${r.mode}) — ${r.passed ? 'PASSED' : 'FAILED'}`,
    '',
    `Started ${r.started_at}; ${r.duration_s.toFixed(0)} s of traffic and kills, ${r.settle_s.toFixed(0)} s to settle. PostgreSQL, ${c.servers} \`baton up\`, ${c.workers} \`baton worker\` (\`${(c.command as string[]).join(' ')}\`), ${c.tasks} task units, ${r.kills.length} SIGKILLs, lease TTL ${c.lease_ttl_seconds} s.`,
    '',
    '| must be zero | value |',
    '|---|---|',
    `| tasks lost (acknowledged but missing, or not terminal after settle) | ${r.lost} |`,
    `| duplicate terminal outcomes (event log) | ${r.duplicate_terminal_outcomes} |`,
    `| over-admissions (event log: recorded seats and replay) | ${r.over_admissions} |`,
    `| canary violations after settle | ${r.canary_violations_after_settle} |`,
    `| flow: F-01/F-02 open after settle (keys, pool ${r.flow.pool}, throttles; ${r.flow.keyed_tasks} keyed tasks from ${r.flow.keyed_submits} submits, ${r.flow.debounced_submits} debounced) | ${r.flow.f01_f02_open} |`,
    ...(r.fleet_kill
      ? [
          `| fleet kill: attempts charged when all ${r.fleet_kill.workers} workers of one agent died at once (held ${r.fleet_kill.held}, re-queued uncharged ${r.fleet_kill.requeued_shared}, finished ${r.fleet_kill.finished}) | ${r.fleet_kill.charged} |`,
        ]
      : []),
    ...(r.chain
      ? [
          `| chain: final outcomes of chaos-a (${r.chain.sources}) without their one follow-up, with more than one, follow-ups whose source had not ended | ${r.chain.missing}; ${r.chain.duplicated}; ${r.chain.orphans} |`,
          `| groups (${r.chain.groups}): undecided after settle; decided without exactly one join | ${r.chain.groups - r.chain.decided}; ${r.chain.bad_joins} |`,
        ]
      : []),
    ...(r.clock_skew
      ? [
          `| clock skew (${r.clock_skew.servers.map((s) => `${s.name} ${s.skew_s > 0 ? '+' : ''}${s.skew_s} s`).join(', ')}): live leases reaped (reaped from killed workers or while their server was down: ${r.clock_skew.reaped_explained}) | ${r.clock_skew.live_leases_reaped} |`,
          `| clock skew: schedule due times fired twice; fired early (of ${r.clock_skew.schedule_runs_seen} seen) | ${r.clock_skew.schedule_fired_twice}; ${r.clock_skew.schedule_fired_early} |`,
          `| clock skew: executions two of whose runs overlapped (of ${r.clock_skew.runs_marked} runs marked by the workers) | ${r.clock_skew.runs_overlapping} |`,
        ]
      : []),
    ...(r.failover ? failoverRows(r.failover) : []),
    ...(r.net_cut
      ? [
          `| net cut: cuts done of planned (each ${r.net_cut.cut_s} s, lease TTL ${r.net_cut.lease_ttl_s} s); executions re-run after a cut | ${r.net_cut.cuts_done}/${r.net_cut.cuts_planned}; ${r.net_cut.executions_rerun_after_cut} |`,
          `| net cut: two runs of one execution overlapping beyond ${r.net_cut.bound_ms / 1000} s (${r.net_cut.bound_ignoring_term_ms / 1000} s after a command ignoring SIGTERM); longest overlap, p99 (ms, of ${r.net_cut.executions_run_twice} executions run twice) | ${r.net_cut.over_bound.length}; ${r.net_cut.overlap_max_ms}, ${r.net_cut.overlap_p99_ms} |`,
        ]
      : []),
    ...(r.failing_agent
      ? [
          `| failing agent: breaker state after ${r.failing_agent.failed} failures (opens at ${r.failing_agent.consecutive}); tasks still queued of ${r.failing_agent.submitted} | ${r.failing_agent.state}; ${r.failing_agent.queued} |`,
        ]
      : []),
    '',
    '| also measured | value |',
    '|---|---|',
    `| executions acknowledged to the driver | ${r.details.acknowledged} |`,
    `| idempotency duplicates (one key, two executions) | ${r.idempotency_duplicates} |`,
    `| throughput (terminal executions / s of traffic) | ${r.throughput_per_s.toFixed(1)} |`,
    `| time to recover after a worker kill, p50 / p99 | ${ms(r.recover.worker_p50_ms)} / ${ms(r.recover.worker_p99_ms)} (target p99 ≤ ${ms(r.recover.target_p99_ms)}) |`,
    `| restarted server ready, p50 / p99 | ${ms(r.recover.server_p50_ms)} / ${ms(r.recover.server_p99_ms)} |`,
    ...(r.failover
      ? [
          `| failover: from the primary's death to the promotion; the probe's first submit; its first claim; the traffic's first submit sent after it; a worker's first claim (seen polling the event log); every server ready | ${[r.failover.promoted_ms, r.failover.first_submit_ms, r.failover.first_claim_ms, r.failover.traffic_first_submit_ms, r.failover.worker_first_claim_ms, r.failover.servers_ready_ms].map(ms).join('; ')} |`,
        ]
      : []),
    ...r.kills
      .filter((k) => k.target === 'postgresql')
      .map((k) => `| PostgreSQL restart: every server ready again after | ${ms(k.recover_ms)} |`),
    `| requests retried on another server | ${r.details.requests_retried} |`,
    `| units given up (no server answered in 90 s) | ${r.details.units_given_up} |`,
    `| cancels requested | ${r.details.cancels_requested} |`,
    `| refusals | ${JSON.stringify(r.details.refused)} |`,
    `| final statuses | ${JSON.stringify(r.details.statuses)} |`,
    `| by trigger | ${JSON.stringify(r.details.by_trigger)} |`,
    '',
    '## Kills',
    '',
    '| at (s) | target | held | recovered after |',
    '|---|---|---|---|',
    ...r.kills.map((k) => `| ${(k.at / 1000).toFixed(1)} | ${k.target} | ${k.kind === 'worker' ? k.held : '-'} | ${ms(k.recover_ms)} |`),
  ];
  if (r.details.canary_open.length)
    lines.push(
      '',
      '## Canary violations after settle',
      '',
      ...r.details.canary_open.map((v) => `- ${v.invariant} ${v.subject} ${v.reason}`),
    );
  if (r.not_exercised.length) lines.push('', '## Not exercised', '', ...r.not_exercised.map((x) => `- ${x}`));
  return lines.join('\n') + '\n';
}

function failoverRows(f: FailoverResult): string[] {
  const sync = f.replication === 'synchronous';
  return [
    `| failover (${f.replication} standby, ${f.standby_at_kill ? `${f.standby_at_kill.sync_state}, ${f.standby_at_kill.lag_bytes} bytes behind` : 'not streaming'} at the kill): acknowledged writes missing on the promoted primary${sync ? '' : ' (reported, not a failure: asynchronous replication can lose them)'} | ${f.acknowledged_lost} |`,
    `| failover: checks read port ${f.checked_on_port ?? '?'} (the promoted standby is ${f.standby_port}); the probe served again (submit, claim) | ${f.checked_on_port === f.standby_port ? 'yes' : 'NO'}; ${f.first_submit_ms !== null && f.first_claim_ms !== null ? 'yes' : 'NO'} |`,
  ];
}

/** The lines `npm run chaos` prints at the end. */
export function summary(r: ChaosReport, files: { json: string; md: string }, wallS: number, terminal: number): string {
  const { fleet_kill: fleet, chain, failing_agent: failing, clock_skew: clock, failover: f } = r;
  return (
    [
      `chaos (${r.mode}): ${r.passed ? 'PASSED' : 'FAILED'} in ${wallS.toFixed(0)} s`,
      `  lost ${r.lost} · duplicate terminal ${r.duplicate_terminal_outcomes} · over-admissions ${r.over_admissions} · canary violations ${r.canary_violations_after_settle} · idempotency duplicates ${r.idempotency_duplicates}`,
      ...(fleet
        ? [
            `  fleet kill: ${fleet.workers} workers of one agent killed at once holding ${fleet.held}; ${fleet.requeued_shared} re-queued uncharged, ${fleet.charged} charged, ${fleet.finished} finished`,
          ]
        : []),
      ...(chain
        ? [
            `  chain: ${chain.sources} final outcomes, ${chain.chained} chained tasks, ${chain.refused} refused; missing ${chain.missing} · duplicated ${chain.duplicated} · orphans ${chain.orphans}; groups ${chain.decided}/${chain.groups} decided, ${chain.bad_joins} without one join`,
          ]
        : []),
      ...(failing
        ? [
            `  failing agent: breaker ${failing.state} after ${failing.failed} failures (opens at ${failing.consecutive}); ${failing.queued} of ${failing.submitted} still queued`,
          ]
        : []),
      `  ${r.details.acknowledged} acknowledged, ${terminal} terminal, ${r.throughput_per_s.toFixed(1)}/s; ${r.kills.length} kills; worker recovery p50 ${r.recover.worker_p50_ms} ms p99 ${r.recover.worker_p99_ms} ms; server ready p50 ${r.recover.server_p50_ms} ms`,
      ...(clock
        ? [
            `  clock skew (±${Math.abs(clock.servers[0]?.skew_s ?? 0)} s): live leases reaped ${clock.live_leases_reaped} · schedule fired twice ${clock.schedule_fired_twice} · early ${clock.schedule_fired_early} (of ${clock.schedule_runs_seen}) · runs overlapping ${clock.runs_overlapping} (of ${clock.runs_marked}); servers said: ${clock.servers.map((s) => (s.said ? 'measured' : 'NOTHING')).join(', ')}`,
          ]
        : []),
      ...(f
        ? [
            `  failover (${f.replication} standby, ${f.standby_at_kill?.sync_state ?? 'not streaming'} at the kill): acknowledged writes lost ${f.acknowledged_lost}; from the primary's death: promoted ${f.promoted_ms} ms, first submit ${f.first_submit_ms ?? 'never'} ms, first claim ${f.first_claim_ms ?? 'never'} ms (the traffic's ${f.traffic_first_submit_ms ?? 'never'} / workers' ${f.worker_first_claim_ms ?? 'never'} ms), servers ready ${f.servers_ready_ms ?? 'never'} ms; checks read :${f.checked_on_port} (promoted standby :${f.standby_port})`,
          ]
        : []),
      ...(r.net_cut ? [`  ${netCutLine(r.net_cut)}`] : []),
      `  ${files.json}`,
      `  ${files.md}`,
    ].join('\n') + '\n'
  );
}
