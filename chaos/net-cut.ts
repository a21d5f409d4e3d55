/**
 * `--net-cut`: the network between some workers and the servers is cut, for longer than a lease,
 * while they run tasks, several times during the load. Each cut-off worker must give its runs up
 * once their leases expire unrenewed on its own clock (the SDK aborts the handler, `baton worker`
 * kills the command's process group) and report nothing; the reaper re-queues them and a worker
 * that still reaches a server runs them again.
 *
 * The cut-off side: a TCP proxy per server (test/helpers/proxy.ts) that this run takes down (every
 * connection closed, new ones refused) and brings back. Behind it: a `baton worker` per traffic
 * agent, one of whose commands ignores SIGTERM (only the SIGKILL after `--kill-grace` ends it),
 * and an SDK worker process per traffic agent (chaos/sdk-worker.ts). Another `baton worker` per
 * agent talks to the servers directly and takes the re-runs during a cut.
 *
 * Every traffic worker appends a start and a stop mark per run to its own marks file, on this
 * machine's wall clock, in ms (every process runs here): `<s|e> <execution> <run> <epoch ms> <worker
 * pid> [wait s | abort reason]`. A command's marks are written by a watcher outside its process
 * group, the stop mark when the group's last writer to a pipe is gone, so a SIGKILLed group is
 * marked too; an SDK worker that was SIGKILLed stopped its runs when it exited. Joined, the marks give
 * for every execution the longest time two of its runs overlapped — from the later run's start to
 * the earlier run's stop, however short the later run was; the run fails if any pair overlapped
 * for longer than the lease TTL plus one renewal interval (a third of the TTL), plus the
 * kill grace when the earlier run's command ignores SIGTERM (src/domain/lease.ts).
 */
import { mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startProxy, type Proxy } from '../test/helpers/proxy.ts';
import { workerProc, type Proc } from './cluster.ts';
import { percentile } from './report.ts';

/** The lease TTL of a `--net-cut` run unless `--lease-ttl` is given: short, so each cut is short. */
export const NET_CUT_TTL_S = 3;
/** How long each cut lasts, in lease TTLs. */
const CUT_TTLS = 2.5;
/** `--kill-grace` of the cut-off `baton worker` whose command ignores SIGTERM. */
const KILL_GRACE_S = 1;
/** One run in this many waits long (two TTLs and a second), so a cut finds runs it outlasts. */
const LONG_ONE_IN = 16;
const SHORT_MS = 50;
const SDK_WORKER = fileURLToPath(new URL('./sdk-worker.ts', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A traffic worker of the `--net-cut` deployment. */
interface Spec {
  name: string;
  agent: string;
  /** Which server it talks to, and whether through the proxy that is cut. */
  server: number;
  cut: boolean;
  kind: 'command' | 'command-ignoring-term' | 'sdk';
}

const SPECS: Spec[] = [
  { name: 'w1', agent: 'chaos-a', server: 0, cut: true, kind: 'command-ignoring-term' },
  { name: 'w2', agent: 'chaos-a', server: 1, cut: false, kind: 'command' },
  { name: 'w3', agent: 'chaos-b', server: 0, cut: true, kind: 'command' },
  { name: 'w4', agent: 'chaos-b', server: 1, cut: false, kind: 'command' },
  { name: 's1', agent: 'chaos-a', server: 1, cut: true, kind: 'sdk' },
  { name: 's2', agent: 'chaos-b', server: 0, cut: true, kind: 'sdk' },
];

/**
 * The traffic command (bash, for its clock without a process per mark): one run in LONG_ONE_IN
 * (by the shell's pid) waits `longMs`. Both marks are written by a watcher in a session of its
 * own that holds the read end of a pipe every process of the run inherits: it writes the start
 * mark once it has left the run's process group, and the stop mark at end of file, once the last
 * of the run's processes has exited or been killed. A group killed before the watcher left it (a
 * worker SIGKILLed just as it started the run; its guardian kills the group) takes the watcher
 * and the whole run with it, so no run is ever marked started without a stop. The start mark
 * trails the command's own start by the watcher's start-up (milliseconds), which can only shorten
 * a measured overlap by as much.
 */
export function markingCommand(marks: string, longMs: number, ignoreTerm: boolean): string[] {
  const now = 't=${EPOCHREALTIME/./}; t=${t:0:13}';
  const watcher = `${now}; echo "s $0 $1 $t $2 $4" >> "$3"; while read -r _; do :; done; ${now}; echo "e $0 $1 $t $2" >> "$3"`;
  const script = [
    ignoreTerm ? "trap '' TERM" : ':',
    `d=${SHORT_MS / 1000}; (( $$ % ${LONG_ONE_IN} == 0 )) && d=${(longMs / 1000).toFixed(1)}`,
    `exec 4> >(exec setsid /bin/bash -c '${watcher}' "$BATON_EXECUTION_ID" "$$" "$PPID" '${marks}' "$d" >/dev/null 2>&1)`,
    'sleep "$d"',
    `echo '{"ok":true}'`,
  ].join('\n');
  return ['/bin/bash', '-c', script];
}

function sdkWorkerProc(
  spec: Spec,
  server: () => string,
  key: string,
  marks: string,
  longMs: number,
  exits: Map<number, number>,
): Proc & { workerId(): string; serverUrl(): string } {
  const p: Proc & { workerId(): string; serverUrl(): string } = {
    name: spec.name,
    kind: 'worker',
    generation: 0,
    tail: [],
    workerId: () => `chaos-${spec.name}-g${p.generation}`,
    serverUrl: server,
    alive: () => !!p.child && p.child.exitCode === null && p.child.signalCode === null,
    async start() {
      p.generation++;
      const env = {
        ...process.env,
        BATON_URL: server(),
        BATON_API_KEY: key,
        CHAOS_AGENT: spec.agent,
        CHAOS_CONCURRENCY: '3',
        CHAOS_WORKER_ID: p.workerId(),
        CHAOS_MARKS: marks,
        CHAOS_LONG_MS: String(longMs),
        CHAOS_LONG_SHARE: String(1 / LONG_ONE_IN),
      };
      const child = spawn(process.execPath, ['--import', 'tsx', SDK_WORKER], { env, stdio: ['ignore', 'pipe', 'pipe'] });
      p.child = child;
      child.once('exit', () => exits.set(child.pid!, Date.now()));
      const keep = (d: Buffer) => {
        for (const line of d.toString().split('\n')) if (line.trim()) p.tail.push(line.slice(0, 500));
        if (p.tail.length > 40) p.tail.splice(0, p.tail.length - 40);
      };
      child.stdout.on('data', keep);
      child.stderr.on('data', keep);
      await sleep(300);
      if (!p.alive()) throw new Error(`${spec.name} exited at start:\n${p.tail.join('\n')}`);
    },
  };
  return p;
}

export interface NetCutResult {
  lease_ttl_s: number;
  cut_s: number;
  cuts_planned: number;
  cuts_done: number;
  /** Runs on a cut-off worker in progress during a cut, and how many SDK runs were aborted as lease_lost. */
  runs_caught_in_a_cut: number;
  sdk_runs_lapsed: number;
  /** Executions with a run caught in a cut and a later run of their own. */
  executions_rerun_after_cut: number;
  executions_run_twice: number;
  runs_marked: number;
  /** Runs with no stop mark and no exit of their worker to stand for one. */
  runs_unended: number;
  /** Over executions run more than once: the longest overlap of two of their runs (negative: a gap). */
  overlap_max_ms: number | null;
  overlap_p99_ms: number | null;
  /** TTL + one renewal interval; + the kill grace after a run whose command ignores SIGTERM. */
  bound_ms: number;
  bound_ignoring_term_ms: number;
  over_bound: Array<{ execution: string; overlap_ms: number; bound_ms: number; runs: string[] }>;
}

interface Run {
  execution: string;
  worker: Spec;
  id: string;
  pid: number;
  start: number;
  end: number | null;
  reason: string;
}

/** The cut-off side of a `--net-cut` run: its proxies, its workers' marks and its cuts. */
export class NetCut {
  readonly cuts: Array<{ from: number; to: number; open_runs: number }> = [];
  private readonly exits = new Map<number, number>();
  private chain: Promise<void> = Promise.resolve();
  private next = 0;
  private readonly marksDir: string;
  private readonly ttlMs: number;

  private constructor(
    private readonly proxies: Proxy[],
    dataDir: string,
    leaseTtlS: number,
    private readonly planned: number,
    private readonly log: (line: string) => void,
  ) {
    this.marksDir = join(dataDir, 'marks');
    mkdirSync(this.marksDir, { recursive: true });
    this.ttlMs = leaseTtlS * 1000;
  }

  /** A proxy in front of each server, on a port from `port()`. */
  static async start(o: {
    servers: Array<{ url: string }>;
    port: () => Promise<number>;
    dataDir: string;
    leaseTtlS: number;
    cuts: number;
    log: (line: string) => void;
  }): Promise<NetCut> {
    const proxies: Proxy[] = [];
    for (const s of o.servers) proxies.push(await startProxy({ host: '127.0.0.1', port: Number(new URL(s.url).port) }, await o.port()));
    return new NetCut(proxies, o.dataDir, o.leaseTtlS, o.cuts, o.log);
  }

  private get longMs(): number {
    return 2 * this.ttlMs + 1_000;
  }

  private get cutMs(): number {
    return CUT_TTLS * this.ttlMs;
  }

  /** The traffic workers (SPECS): through a proxy or straight to their server. */
  workers(servers: Array<{ url: string }>, key: string): Array<Proc & { workerId(): string; serverUrl(): string }> {
    return SPECS.map((s) => {
      const url = s.cut ? `http://127.0.0.1:${this.proxies[s.server]!.port}` : servers[s.server]!.url;
      const marks = join(this.marksDir, `${s.name}.marks`);
      if (s.kind === 'sdk') return sdkWorkerProc(s, () => url, key, marks, this.longMs, this.exits);
      const ignoring = s.kind === 'command-ignoring-term';
      return workerProc(s.name, s.agent, () => url, key, 3, markingCommand(marks, this.longMs, ignoring), [
        '--kill-grace',
        String(ignoring ? KILL_GRACE_S : 5),
      ]);
    });
  }

  /** Called with the traffic's progress: cuts spread evenly over the units, one after another. */
  onUnit(done: number, total: number): void {
    while (this.next < this.planned && done >= Math.floor(((this.next + 0.3) * total) / this.planned)) {
      this.next++;
      this.chain = this.chain.then(() => this.cutOnce()).catch((err) => this.log(`net cut failed: ${(err as Error).message}`));
    }
  }

  /** Resolves once every cut started so far is over and the network is back. */
  finished(): Promise<void> {
    return this.chain;
  }

  async close(): Promise<void> {
    await Promise.all(this.proxies.map((p) => p.close()));
  }

  /** Waits (a while) for cut-off workers to be inside long runs, so the cut outlasts their leases. */
  private async cutOnce(): Promise<void> {
    const until = Date.now() + 20_000;
    let open = this.openLongRuns();
    while (open < 2 && Date.now() < until) {
      await sleep(100);
      open = this.openLongRuns();
    }
    const from = Date.now();
    await Promise.all(this.proxies.map((p) => p.down()));
    this.log(`network cut for ${(this.cutMs / 1000).toFixed(1)} s (${open} long runs open behind it)`);
    await sleep(this.cutMs);
    await Promise.all(this.proxies.map((p) => p.up()));
    this.cuts.push({ from, to: Date.now(), open_runs: open });
  }

  private openLongRuns(): number {
    return this.runs().filter((r) => r.worker.cut && r.end === null && r.reason === 'long').length;
  }

  /** Every run in the marks files; `reason` is the stop's (SDK), or 'long' for an open long run. */
  private runs(): Run[] {
    const runs = new Map<string, Run>();
    for (const file of readdirSync(this.marksDir)) {
      const worker = SPECS.find((s) => `${s.name}.marks` === file);
      if (!worker) continue;
      for (const line of readFileSync(join(this.marksDir, file), 'utf8').split('\n')) {
        const [what, execution, id, at, pid, extra] = line.split(' ');
        if (!execution || !id || !at || !pid) continue;
        const key = `${worker.name}/${id}/${execution}`;
        const run = runs.get(key) ?? { execution, worker, id, pid: Number(pid), start: Number(at), end: null, reason: '' };
        if (what === 's') {
          run.start = Number(at);
          if (Number(extra) * 1000 >= this.longMs) run.reason ||= 'long';
        } else {
          run.end = Number(at);
          run.reason = extra ?? '';
        }
        runs.set(key, run);
      }
    }
    return [...runs.values()];
  }

  /** Joins the marks (after settle: no run is in progress). */
  check(): NetCutResult {
    const renewMs = this.ttlMs / 3;
    const bound = this.ttlMs + renewMs;
    const boundIgnoring = bound + KILL_GRACE_S * 1000;
    const runs = this.runs();
    let unended = 0;
    for (const r of runs) {
      if (r.end !== null) continue;
      const exited = this.exits.get(r.pid);
      if (exited === undefined) unended++;
      r.end = exited ?? Date.now();
    }
    const byExecution = new Map<string, Run[]>();
    for (const r of runs) byExecution.set(r.execution, [...(byExecution.get(r.execution) ?? []), r]);
    const inCut = (r: Run) => r.worker.cut && this.cuts.some((c) => r.start < c.to && r.end! > c.from);
    const overlaps: number[] = [];
    const overBound: NetCutResult['over_bound'] = [];
    let rerun = 0;
    for (const [execution, list] of byExecution) {
      if (list.length < 2) continue;
      list.sort((a, b) => a.start - b.start);
      if (list.some((r, i) => inCut(r) && i < list.length - 1)) rerun++;
      let worst = -Infinity;
      for (let i = 0; i < list.length; i++) {
        for (let j = i + 1; j < list.length; j++) {
          const [a, b] = [list[i]!, list[j]!];
          // How long the earlier run went on after the later one started (even if that one was short).
          const overlap = a.end! - b.start;
          worst = Math.max(worst, overlap);
          const limit = a.worker.kind === 'command-ignoring-term' ? boundIgnoring : bound;
          if (overlap > limit)
            overBound.push({ execution, overlap_ms: overlap, bound_ms: limit, runs: [a, b].map((r) => `${r.worker.name}/${r.id}`) });
        }
      }
      overlaps.push(worst);
    }
    return {
      lease_ttl_s: this.ttlMs / 1000,
      cut_s: this.cutMs / 1000,
      cuts_planned: this.planned,
      cuts_done: this.cuts.length,
      runs_caught_in_a_cut: runs.filter(inCut).length,
      sdk_runs_lapsed: runs.filter((r) => r.reason === 'lease_lost').length,
      executions_rerun_after_cut: rerun,
      executions_run_twice: overlaps.length,
      runs_marked: runs.length,
      runs_unended: unended,
      overlap_max_ms: overlaps.length ? Math.max(...overlaps) : null,
      overlap_p99_ms: percentile(overlaps, 99),
      bound_ms: bound,
      bound_ignoring_term_ms: boundIgnoring,
      over_bound: overBound.slice(0, 20),
    };
  }
}

/**
 * A run with no stop mark is not a failure by itself: it counts as running until the check, so a
 * re-run of its execution would overlap it past the bound.
 */
export function netCutPassed(r: NetCutResult): boolean {
  return r.cuts_done === r.cuts_planned && r.executions_rerun_after_cut > 0 && r.over_bound.length === 0;
}

export function netCutLine(r: NetCutResult): string {
  const s = (ms: number | null) => (ms === null ? '–' : `${(ms / 1000).toFixed(2)} s`);
  return (
    `net cut (lease TTL ${r.lease_ttl_s} s): ${r.cuts_done}/${r.cuts_planned} cuts of ${r.cut_s} s; ${r.runs_caught_in_a_cut} runs caught in a cut ` +
    `(${r.sdk_runs_lapsed} SDK runs lapsed), ${r.executions_rerun_after_cut} executions re-run after a cut; ` +
    `overlap of two runs over ${r.executions_run_twice} executions run twice: max ${s(r.overlap_max_ms)}, p99 ${s(r.overlap_p99_ms)} ` +
    `(bound ${s(r.bound_ms)}, ${s(r.bound_ignoring_term_ms)} after a command ignoring SIGTERM); over the bound ${r.over_bound.length}; ${r.runs_unended} of ${r.runs_marked} runs without a stop`
  );
}
