/**
 * `npm run chaos [-- --quick] [--tasks N] [--kills N] [--lease-ttl S] [--pg-restart | --pg-failover | --pg-failover-async] [--clock-skew] [--net-cut [--cuts N]] [--keep]`
 *
 * A real deployment on PostgreSQL — two `baton up`, four `baton worker` running a small shell
 * command — under a traffic driver (API submissions, manual schedule triggers, webhooks, all
 * with Idempotency-Keys; some cancels) while random servers and workers are SIGKILLed and
 * restarted. Then it settles and reports from the database; exit 1 if anything was lost,
 * completed twice, over-admitted, or the canary is unhappy. See docs/operations.md.
 * `--clock-skew` runs one server with its clock two minutes fast and the other two minutes slow
 * (chaos/clock-skew.ts), and checks that no live lease was reaped, no schedule fired twice or
 * early and no task ran twice at once. `--pg-failover` runs on a primary and a synchronous standby
 * of its own, kills the primary halfway and promotes the standby (chaos/failover.ts): no
 * acknowledged write may be missing on the promoted primary, where every check then reads.
 * `--net-cut` (chaos/net-cut.ts) puts a proxy between some workers — `baton worker` and SDK
 * processes — and the servers, cuts it for longer than a lease several times under the load, and
 * checks from the workers' own marks that no two runs of a task overlapped beyond the bound.
 */
import { execSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { readKeyFile } from '../src/auth/keys.ts';
import { openPostgres } from '../src/store/postgres.ts';
import { serverProc, sigkill, stopAll, waitReady, workerProc, type Proc } from './cluster.ts';
import { CHAIN_TARGET, checkChain, createGroups, setupChain } from './chains.ts';
import {
  checkClockSkew,
  checkSkewTakes,
  clockSkewPassed,
  lapseExplained,
  markingCommand,
  ScheduleWatch,
  SKEW_S,
  skewedClockEnv,
  type ClockSkewResult,
} from './clock-skew.ts';
import { failingAgentPhase } from './failing.ts';
import { afterFailover, createProbeAgent, failOver, failoverPassed, startFailoverCluster, type FailoverResult } from './failover.ts';
import { fleetKillPhase } from './fleet.ts';
import { analyse, percentile, summary, writeReport, type ChaosReport, type KillRecord } from './report.ts';
import { drive } from './traffic.ts';
import { CHAOS_POOL, setupFlow, startKeyedLoad } from './flow.ts';
import { NetCut, netCutLine, netCutPassed, type NetCutResult } from './net-cut.ts';
import { freePort, log, parse, rng, sleep } from './options.ts';

async function main(): Promise<number> {
  const o = parse(process.argv.slice(2));
  const random = rng(o.seed);
  const killRandom = rng(o.seed ^ 0x5bd1e995);
  const startedAt = new Date();
  const notExercised: string[] = [];
  const schema = `chaos_${Date.now().toString(36)}`;
  const dataDir = mkdtempSync(join(tmpdir(), 'baton-chaos-'));
  const cluster = o.pgFailover ? await startFailoverCluster(!o.pgFailoverAsync) : undefined;
  if (cluster)
    log(`own cluster: primary :${cluster.primary.port}, ${cluster.replication} standby :${cluster.standby.port} (${cluster.dir})`);
  else notExercised.push('primary failover (pass --pg-failover: a primary and a standby of its own, the primary killed halfway)');
  const databaseUrl = cluster?.url ?? o.databaseUrl;
  const env = { BATON_DATABASE_URL: databaseUrl, BATON_PG_SCHEMA: schema, BATON_DATA_DIR: dataDir, BATON_CANARY_INTERVAL_MS: '10000' };
  const marks = join(dataDir, 'runs.marks');
  const command = o.clockSkew ? markingCommand(marks) : ['/bin/sh', '-c', 'cat >/dev/null; sleep 0.05; echo \'{"ok":true}\''];
  log(`seed ${o.seed}; schema ${schema}; ${o.tasks} units, ${o.kills} kills, lease TTL ${o.leaseTtl} s`);

  // With --clock-skew, server-1's clock is SKEW_S fast and server-2's SKEW_S slow.
  const skews = o.clockSkew ? [SKEW_S, -SKEW_S] : [0, 0];
  const skewEnv = skews.map((s) => (s === 0 ? {} : skewedClockEnv(s)));
  skews.forEach((s, i) => s !== 0 && checkSkewTakes(skewEnv[i]!, s));
  if (o.clockSkew) log(`clock skew: server-1 ${SKEW_S} s fast, server-2 ${SKEW_S} s slow (libfaketime)`);
  else notExercised.push('skewed clocks (pass --clock-skew; it needs libfaketime: apt-get install faketime)');

  const store = openPostgres({ url: databaseUrl, schema, poolMax: 3 });
  const servers = await Promise.all(
    skews.map(async (skew, i) => Object.assign(serverProc(`server-${i + 1}`, await freePort(), { ...env, ...skewEnv[i] }), { skew })),
  );
  const procs: Proc[] = [...servers];
  let exitCode = 1;
  let passed = false;
  let net: NetCut | undefined;
  try {
    await servers[0]!.start();
    const key = readKeyFile(dataDir);
    if (!key) throw new Error('no admin key was written by the first server');
    await servers[1]!.start();
    const admin = async (method: string, path: string, body?: unknown) => {
      const headers: Record<string, string> = { authorization: `Bearer ${key}` };
      if (body !== undefined) headers['content-type'] = 'application/json';
      const r = await fetch(servers[0]!.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await r.text();
      return { status: r.status, body: text ? JSON.parse(text) : null };
    };

    const agents = [
      { name: 'chaos-a', max_parallel: 3 },
      { name: 'chaos-b', max_parallel: 4 },
    ];
    for (const a of agents) {
      const r = await admin('POST', '/v1/agents', {
        ...a,
        max_backlog: 100_000,
        lease_ttl_seconds: o.leaseTtl,
        timeout_seconds: 300,
        max_redeliveries: 20,
      });
      if (r.status !== 201) throw new Error(`create agent ${a.name}: ${r.status} ${JSON.stringify(r.body)}`);
    }
    await setupFlow(store);
    if (cluster) await createProbeAgent(admin);
    // Every outcome of chaos-a starts a follow-up on chaos-chain, through kills and restarts.
    const subscriptionId = await setupChain(admin, 'chaos-a', o.leaseTtl);
    // Groups of three over both traffic agents, each joined on chaos-chain, queued with the traffic.
    await createGroups(
      admin,
      agents.map((a) => a.name),
      20,
    );
    let scheduleId: string | null = null;
    const sch = await admin('POST', '/v1/agents/chaos-b/schedules', {
      name: 'chaos-tick',
      cron: '* * * * * *',
      message: 'tick',
      overlap_policy: 'allow',
      misfire_grace_seconds: 5,
    });
    if (sch.status === 201) scheduleId = sch.body.id;
    else notExercised.push(`schedules (POST /v1/agents/:agent/schedules answered ${sch.status})`);
    const watch = o.clockSkew && scheduleId ? new ScheduleWatch(store, scheduleId) : undefined;
    let webhookPath: string | null = null;
    const wh = await admin('POST', '/v1/webhooks', { name: 'chaos-hook', agent: 'chaos-a', overlap_policy: 'allow' });
    if (wh.status === 201) webhookPath = wh.body.path;
    else notExercised.push(`webhooks (POST /v1/webhooks answered ${wh.status})`);

    net = o.netCuts ? await NetCut.start({ servers, port: freePort, dataDir, leaseTtlS: o.leaseTtl, cuts: o.netCuts, log }) : undefined;
    const workers = [
      ...(net?.workers(servers, key) ?? [
        workerProc('w1', 'chaos-a', () => servers[0]!.url, key, 3, command),
        workerProc('w2', 'chaos-a', () => servers[1]!.url, key, 3, command),
        workerProc('w3', 'chaos-b', () => servers[0]!.url, key, 3, command),
        workerProc('w4', 'chaos-b', () => servers[1]!.url, key, 3, command),
      ]),
      workerProc('w5', CHAIN_TARGET, () => servers[1]!.url, key, 2, command),
    ];
    procs.push(...workers);
    for (const w of workers) await w.start();
    log(
      `deployment up: 2 servers, ${workers.length} workers${net ? ' (four behind a proxy that is cut)' : ''}${scheduleId ? ', a schedule firing every second' : ''}${webhookPath ? ', a webhook' : ''}`,
    );

    let open = 0;
    let polling = true;
    const poller = (async () => {
      while (polling) {
        try {
          const r = await store.db
            .selectFrom('executions')
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .where('status', 'in', ['queued', 'running'])
            .executeTakeFirstOrThrow();
          open = Number(r.n);
          await watch?.look();
        } catch {
          /* PostgreSQL restarting */
        }
        await sleep(250);
      }
    })();

    const t0 = Date.now();
    const kills: KillRecord[] = [];
    const recoveries: Promise<void>[] = [];
    let killing = Promise.resolve();
    const thresholds = Array.from({ length: o.kills }, (_, k) => Math.floor(((k + 0.5) * o.tasks) / o.kills));
    let nextKill = 0;
    let pgRestarted = false;
    let failover: FailoverResult | undefined;
    let failingOver = false;

    // The harness's own reads ride out a PostgreSQL restart like everything else: retried, not fatal.
    const patiently = async <T>(read: () => Promise<T>): Promise<T> => {
      for (let i = 0; ; i++) {
        try {
          return await read();
        } catch (err) {
          if (i >= 120) throw err;
          await sleep(250);
        }
      }
    };
    const heldBy = async (owner: string) =>
      (
        await patiently(() =>
          store.db.selectFrom('executions').select('id').where('status', '=', 'running').where('lease_owner', '=', owner).execute(),
        )
      ).map((r) => r.id);

    async function killOne() {
      const serversUp = servers.filter((s) => s.alive()).length;
      const candidates = procs.filter((p) => p.alive() && (p.kind === 'worker' || serversUp > 1));
      const pick = Math.floor(killRandom() * candidates.length);
      const target = candidates[pick]!;
      const rec: KillRecord = {
        at: Date.now() - t0,
        target: `${target.name}#${target.generation}`,
        kind: target.kind,
        held: 0,
        recover_ms: null,
      };
      kills.push(rec);
      const killedAt = Date.now();
      if (target.kind === 'worker') {
        const owner = (target as (typeof workers)[number]).workerId();
        const before = await heldBy(owner);
        sigkill(target);
        await sleep(300);
        const held = [...new Set([...before, ...(await heldBy(owner))])];
        rec.held = held.length;
        log(`SIGKILL ${rec.target} holding ${held.length}`);
        await sleep(500 + killRandom() * 1_000);
        await target.start();
        recoveries.push(
          (async () => {
            for (;;) {
              const rows = held.length
                ? await patiently(() =>
                    store.db.selectFrom('executions').select(['id', 'status', 'lease_owner']).where('id', 'in', held).execute(),
                  )
                : [];
              if (rows.every((r) => r.status !== 'queued' && (r.status !== 'running' || r.lease_owner !== owner))) {
                rec.recover_ms = Date.now() - killedAt;
                return;
              }
              await sleep(200);
            }
          })(),
        );
      } else {
        sigkill(target);
        log(`SIGKILL ${rec.target}`);
        await sleep(500 + killRandom() * 1_000);
        await target.start();
        rec.recover_ms = Date.now() - killedAt;
      }
    }

    const keyed = startKeyedLoad(store, 50, Math.ceil(o.tasks / 5));
    const traffic = await drive({
      servers,
      key,
      agents: agents.map((a) => a.name),
      scheduleId,
      webhookPath,
      tasks: o.tasks,
      concurrency: o.concurrency,
      cancelRate: 0.05,
      replayRate: 0.03,
      random,
      maxOpen: 300,
      openCount: () => open,
      onUnit(done) {
        net?.onUnit(done, o.tasks);
        while (nextKill < thresholds.length && done >= thresholds[nextKill]!) {
          nextKill++;
          killing = killing.then(killOne).catch((err) => void log(`kill failed: ${(err as Error).message}`));
        }
        if (o.pgRestart && !pgRestarted && done >= o.tasks / 2) {
          pgRestarted = true;
          killing = killing.then(async () => {
            log(`restarting PostgreSQL: ${o.pgRestartCmd}`);
            const at = Date.now();
            execSync(o.pgRestartCmd, { stdio: 'ignore' });
            // Recovered when every server answers ready again (its pool reconnected by itself).
            for (const srv of servers) await waitReady(srv.url, srv, 60_000);
            const rec = { at: at - t0, target: 'postgresql', kind: 'server' as const, held: 0, recover_ms: Date.now() - at };
            kills.push(rec);
            log(`PostgreSQL restarted; servers ready again after ${rec.recover_ms} ms`);
          });
        }
        if (cluster && !failingOver && done >= o.tasks / 2) {
          failingOver = true;
          killing = killing.then(async () => {
            failover = await failOver({ cluster, store, servers, key, t0, log });
            kills.push({
              at: failover.died_at_ms,
              target: 'postgresql-primary',
              kind: 'server',
              held: 0,
              recover_ms: failover.servers_ready_ms,
            });
          });
        }
      },
    });
    await killing;
    await net?.finished();
    await keyed.stop();
    // The keyed tasks are held to the same account as the traffic's: each must end once.
    for (const id of keyed.ids) traffic.acknowledged.set(id, 'api');
    log(`keyed load: ${keyed.submitted} submits (${keyed.debounced} debounced) → ${keyed.ids.size} tasks on chaos-a`);
    const trafficS = (Date.now() - t0) / 1000;
    log(`traffic done in ${trafficS.toFixed(0)} s: ${traffic.acknowledged.size} executions acknowledged; settling`);
    if (!o.pgRestart) notExercised.push('PostgreSQL restart (pass --pg-restart; it restarts the shared server, so it is off by default)');

    // Settle: stop the cron schedule, let every process come back, wait for the queue to drain.
    for (const p of procs) if (!p.alive()) await p.start();
    if (scheduleId) await admin('PATCH', `/v1/schedules/${scheduleId}`, { enabled: false });
    const settleStart = Date.now();
    const settleLimit = 3 * o.leaseTtl * 1000 + 120_000;
    while (open > 0 && Date.now() - settleStart < settleLimit) await sleep(250);
    await Promise.race([Promise.all(recoveries), sleep(30_000)]);
    polling = false;
    await poller;
    for (const s of servers) await waitReady(s.url, s, 30_000);
    const settleS = (Date.now() - settleStart) / 1000;
    const cut: NetCutResult | undefined = net?.check();
    if (cut) log(netCutLine(cut));
    else notExercised.push('a cut network between workers and servers (pass --net-cut)');

    // Shared-cause lapses: all of one agent's workers die at once; no attempt may be charged.
    const fleet = await fleetKillPhase({ store, admin, server: () => servers[0]!.url, key, leaseTtl: o.leaseTtl, command, procs, log });

    // Circuit breaker: one agent whose every task fails; the breaker opens, its backlog survives.
    const failing = await failingAgentPhase({ store, admin, server: () => servers[0]!.url, key, leaseTtl: o.leaseTtl, procs, log });

    // Before anything stops: a worker's generation says whether its leases could lapse.
    let clock: ClockSkewResult | undefined;
    if (o.clockSkew) {
      clock = await checkClockSkew({
        store,
        servers,
        scheduleId,
        watch,
        marks,
        explained: lapseExplained({ procs, servers, kills, t0, leaseTtlMs: o.leaseTtl * 1000 }),
      });
      log(
        `clock skew: ${clock.live_leases_reaped} live leases reaped (${clock.reaped_explained} explained by a kill); schedule fired twice ${clock.schedule_fired_twice}, early ${clock.schedule_fired_early} of ${clock.schedule_runs_seen}; ${clock.runs_overlapping} of ${clock.runs_marked} runs overlapping`,
      );
    }

    // The probe's task was acknowledged like the traffic's: held to the same account.
    if (failover?.probe_execution) traffic.acknowledged.set(failover.probe_execution, 'api');
    const cycle = await admin('POST', '/v1/canary/run');
    const openViolations = (await admin('GET', '/v1/canary/violations?state=open&limit=500')).body?.violations ?? [];
    const facts = await analyse(store, traffic);
    if (failover) await afterFailover(store, failover, t0, traffic, facts.details.acknowledged_missing_count);
    const chain = await checkChain(store, 'chaos-a', subscriptionId);
    log(
      `chain: ${chain.sources} final outcomes of chaos-a started ${chain.chained} tasks (${chain.refused} refused); missing ${chain.missing}, duplicated ${chain.duplicated}, orphans ${chain.orphans}; groups ${chain.decided}/${chain.groups} decided, ${chain.bad_joins} without exactly one join`,
    );
    const workerTtr = kills.filter((k) => k.kind === 'worker' && k.recover_ms !== null && k.held > 0).map((k) => k.recover_ms!);
    const serverTtr = kills
      .filter((k) => k.kind === 'server' && !k.target.startsWith('postgresql') && k.recover_ms !== null)
      .map((k) => k.recover_ms!);
    const terminal = Object.entries(facts.details.statuses)
      .filter(([s]) => !['queued', 'running'].includes(s))
      .reduce((n, [, v]) => n + v, 0);
    const report: ChaosReport = {
      mode: o.mode,
      started_at: startedAt.toISOString(),
      duration_s: trafficS,
      settle_s: settleS,
      config: {
        tasks: o.tasks,
        kills: o.kills,
        servers: 2,
        workers: workers.length,
        worker_concurrency: 3,
        lease_ttl_seconds: o.leaseTtl,
        driver_concurrency: o.concurrency,
        seed: o.seed,
        agents,
        command,
        pg_restart: o.pgRestart,
        pg_failover: cluster ? cluster.replication : false,
        clock_skew_s: skews,
        net_cuts: o.netCuts,
      },
      ...facts,
      canary_violations_after_settle: cycle.status === 200 ? openViolations.length : -1,
      flow: {
        pool: CHAOS_POOL,
        keyed_submits: keyed.submitted,
        keyed_tasks: keyed.ids.size,
        debounced_submits: keyed.debounced,
        f01_f02_open: openViolations.filter((v: any) => v.invariant === 'F-01' || v.invariant === 'F-02').length,
      },
      details: {
        ...facts.details,
        canary_open: openViolations.map((v: any) => ({ invariant: v.invariant, subject: v.subject, reason: v.reason })),
      },
      kills,
      recover: {
        worker_p50_ms: percentile(workerTtr, 50),
        worker_p99_ms: percentile(workerTtr, 99),
        server_p50_ms: percentile(serverTtr, 50),
        server_p99_ms: percentile(serverTtr, 99),
        target_p99_ms: o.leaseTtl * 1000 + 10_000,
      },
      throughput_per_s: terminal / trafficS,
      fleet_kill: fleet,
      failing_agent: failing,
      chain,
      clock_skew: clock,
      failover,
      net_cut: cut,
      passed: false,
      not_exercised: notExercised,
    };
    if (cycle.status !== 200) report.not_exercised.push(`canary after settle (POST /v1/canary/run answered ${cycle.status})`);
    // Asynchronous replication may lose acknowledged writes: counted in the failover's figures, not failed.
    const lostCounted = report.lost - (failover?.replication === 'asynchronous' ? failover.acknowledged_lost : 0);
    passed =
      lostCounted === 0 &&
      report.duplicate_terminal_outcomes === 0 &&
      report.over_admissions === 0 &&
      report.canary_violations_after_settle === 0 &&
      report.flow.f01_f02_open === 0 &&
      fleet.held >= 2 &&
      fleet.charged === 0 &&
      fleet.finished === fleet.held &&
      failing.state === 'open' &&
      failing.failed === failing.consecutive &&
      failing.queued === failing.submitted - failing.consecutive &&
      chain.sources > 0 &&
      chain.missing === 0 &&
      chain.duplicated === 0 &&
      chain.orphans === 0 &&
      chain.decided === chain.groups &&
      chain.bad_joins === 0 &&
      (!clock || clockSkewPassed(clock)) &&
      (!cluster || (!!failover && failoverPassed(failover))) &&
      (!cut || netCutPassed(cut));
    report.passed = passed;
    const files = writeReport(report);
    process.stdout.write(summary(report, files, trafficS + settleS, terminal));
    exitCode = passed ? 0 : 1;
  } catch (err) {
    log(`run failed: ${(err as Error).stack ?? err}`);
    for (const p of procs) if (p.tail.length) log(`${p.name} output:\n${p.tail.slice(-10).join('\n')}`);
  } finally {
    await stopAll(procs);
    await net?.close();
    await store.close();
    // The failover's clusters are the run's own: stopped always, their files kept like the schema.
    cluster?.close(passed && !o.keep);
    if (passed && !o.keep) {
      if (!cluster) {
        const c = new pg.Client({ connectionString: o.databaseUrl });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await c.end();
      }
      rmSync(dataDir, { recursive: true, force: true });
    } else {
      log(
        `kept PostgreSQL schema ${schema}${cluster ? ` (its promoted standby in ${cluster.dir}/standby, stopped)` : ''} and ${dataDir} for inspection`,
      );
    }
  }
  return exitCode;
}

main().then((code) => process.exit(code));
