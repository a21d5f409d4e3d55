/**
 * Run one OS command per task (what `baton worker -- <command>` does), as an SDK handler.
 *
 * - The message goes to stdin; BATON_EXECUTION_ID, BATON_ATTEMPT, BATON_AGENT, BATON_DEADLINE,
 *   TRACEPARENT (the execution's W3C trace context) and the payload (BATON_PAYLOAD as JSON, or BATON_PAYLOAD_FILE naming a 0600 file when it is
 *   large) go in the environment.
 * - stdout becomes the result (bounded; truncation is marked); stdout and stderr lines stream as
 *   logs. Exit 0 → succeeded; otherwise failed with the exit code or signal and the last stderr lines.
 * - The command runs in its own process group (spawned detached). On abort (cancel, deadline,
 *   lease loss, shutdown) the whole group gets SIGTERM, then SIGKILL after the grace period; when
 *   the command exits on its own, whatever it left running in its group is killed too. The
 *   handler returns only after the command has exited, so nothing it started outlives the task.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import type { BatonErrorCode } from '../domain/error-codes.ts';
import { outcome, type Handler, type Task, type TaskOutcome } from './sdk.ts';

export interface CommandOptions {
  command: string;
  args?: string[];
  /** stdout kept as the result (default 1 MiB); the rest is dropped and the cut is marked. */
  resultLimitBytes?: number;
  /** SIGTERM → SIGKILL grace (default 5 s): long enough to flush and exit, short enough to free the seat. */
  killGraceMs?: number;
  /** Payloads larger than this (serialised) go to a file instead of BATON_PAYLOAD (default 64 KiB). */
  payloadEnvLimitBytes?: number;
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /**
   * Kill every running task's process group at once if the worker process itself dies (SIGKILL,
   * OOM), so a crashed worker leaves no command running (default true; needs /bin/sh).
   */
  orphanWatch?: boolean;
}

/**
 * The guardian: one small `sh` per worker, in its own process group, that the worker tells
 * `+<pgid>` / `-<pgid>` on its stdin as tasks start and end. When the worker dies for any reason
 * its end of the pipe closes, `read` sees EOF, and the guardian SIGKILLs every group still
 * registered. Builtins only: no process per task.
 */
const GUARDIAN = `groups=""
while read -r op pg; do
  case "$op" in
    +) groups="$groups $pg" ;;
    -) keep=""; for g in $groups; do [ "$g" = "$pg" ] || keep="$keep $g"; done; groups="$keep" ;;
  esac
done
for g in $groups; do kill -KILL -"$g" 2>/dev/null; done`;

function startGuardian(): { add(pgid: number): void; remove(pgid: number): void } {
  const child = spawn('/bin/sh', ['-c', GUARDIAN], { detached: true, stdio: ['pipe', 'ignore', 'ignore'] });
  child.on('error', () => {}); // no /bin/sh: tasks still run, only without the crash guard
  child.stdin!.on('error', () => {});
  // Neither the guardian nor its pipe keeps the worker alive; it exits when the worker does.
  child.unref();
  (child.stdin as unknown as { unref?: () => void }).unref?.();
  const send = (line: string) => {
    if (child.stdin!.writable) child.stdin!.write(line);
  };
  return { add: (pgid) => send(`+ ${pgid}\n`), remove: (pgid) => send(`- ${pgid}\n`) };
}

export const RESULT_LIMIT_BYTES = 1024 * 1024;
const STDERR_TAIL_LINES = 20;
/** A log line longer than this is split (the server cuts stored lines at 16 KiB anyway). */
const MAX_LINE_CHARS = 16 * 1024;

export interface CommandRunner {
  handler: Handler;
  /** Process groups running now (their leaders' pids). */
  live(): number[];
  /** SIGKILL every running group at once (a second shutdown signal). Synchronous. */
  killAll(): void;
}

/** Throws a clear error when `command` cannot be found or executed (checked at worker start). */
export function resolveCommand(command: string, env: NodeJS.ProcessEnv = process.env): string {
  const candidates = command.includes('/')
    ? [command]
    : (env.PATH ?? '')
        .split(delimiter)
        .filter(Boolean)
        .map((d) => join(d, command));
  for (const c of candidates) {
    try {
      accessSync(c, constants.X_OK);
      return c;
    } catch {
      /* next */
    }
  }
  throw new Error(
    command.includes('/') ? `command '${command}' does not exist or is not executable` : `command '${command}' was not found on PATH`,
  );
}

/** Split a byte stream into lines, calling `onLine` per complete line; `end()` flushes the rest. */
function lineSplitter(onLine: (line: string) => void) {
  const decoder = new StringDecoder('utf8');
  let partial = '';
  const emit = (s: string) => {
    for (let i = 0; i < s.length; i += MAX_LINE_CHARS) onLine(s.slice(i, i + MAX_LINE_CHARS));
    if (s.length === 0) onLine('');
  };
  return {
    write(chunk: Buffer) {
      const parts = (partial + decoder.write(chunk)).split('\n');
      partial = parts.pop()!;
      for (const p of parts) emit(p.replace(/\r$/, ''));
      if (partial.length > MAX_LINE_CHARS * 4) {
        emit(partial);
        partial = '';
      }
    },
    end() {
      const rest = partial + decoder.end();
      partial = '';
      if (rest) emit(rest.replace(/\r$/, ''));
    },
  };
}

function killGroup(pgid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false; // ESRCH: the group is gone
  }
}

/** The process groups of the tasks running now, and the guardian that kills them if the worker dies. */
class ProcessGroups {
  readonly live = new Set<number>();
  private guardian: ReturnType<typeof startGuardian> | undefined;

  constructor(private readonly orphanWatch: boolean) {}

  add(pgid: number): void {
    this.live.add(pgid);
    if (this.orphanWatch) (this.guardian ??= startGuardian()).add(pgid);
  }

  remove(pgid: number): void {
    this.live.delete(pgid);
    this.guardian?.remove(pgid);
  }
}

interface RunSettings {
  command: string;
  args: string[];
  cwd: string | undefined;
  /**
   * The environment every command starts from, copied once: reading `process.env` walks the
   * process's environment block in C++ on every access, a share of each task's cost worth
   * paying once. Holds no BATON_PAYLOAD* (each task sets its own).
   */
  baseEnv: NodeJS.ProcessEnv;
  resultLimit: number;
  grace: number;
  payloadLimit: number;
}

export function commandRunner(opts: CommandOptions): CommandRunner {
  const groups = new ProcessGroups(opts.orphanWatch !== false);
  const settings: RunSettings = {
    command: opts.command,
    args: opts.args ?? [],
    cwd: opts.cwd,
    baseEnv: baseEnvOf(opts.env ?? process.env),
    resultLimit: opts.resultLimitBytes ?? RESULT_LIMIT_BYTES,
    grace: opts.killGraceMs ?? 5_000,
    payloadLimit: opts.payloadEnvLimitBytes ?? 64 * 1024,
  };
  return {
    handler: (task: Task) => runCommand(task, settings, groups),
    live: () => [...groups.live],
    killAll() {
      for (const g of groups.live) killGroup(g, 'SIGKILL');
    },
  };
}

function baseEnvOf(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const base = { ...env };
  delete base.BATON_PAYLOAD;
  delete base.BATON_PAYLOAD_FILE;
  return base;
}

/** The command's environment for a task; a large payload goes to a 0600 file it names instead. */
function commandEnv(task: Task, s: RunSettings): { env: NodeJS.ProcessEnv; payloadFile: string | undefined } {
  const env: NodeJS.ProcessEnv = {
    ...s.baseEnv,
    BATON_EXECUTION_ID: task.executionId,
    BATON_ATTEMPT: String(task.attempt),
    BATON_AGENT: task.agent,
    BATON_DEADLINE: task.deadline.toISOString(),
    // The standard variable OpenTelemetry SDKs read (where they support it) to continue a trace.
    TRACEPARENT: task.traceparent,
  };
  const payload = JSON.stringify(task.payload ?? null);
  let payloadFile: string | undefined;
  if (Buffer.byteLength(payload) > s.payloadLimit) {
    payloadFile = join(tmpdir(), `baton-payload-${task.executionId}-${task.attempt}-${process.pid}.json`);
    writeFileSync(payloadFile, payload, { mode: 0o600 });
    env.BATON_PAYLOAD_FILE = payloadFile;
  } else {
    env.BATON_PAYLOAD = payload;
  }
  return { env, payloadFile };
}

interface CommandEnd {
  exit: { code: number | null; signal: NodeJS.Signals | null };
  /** stdout as kept (up to the result limit), and whether more was dropped. */
  stdout: string;
  stdoutCut: boolean;
  stderrTail: string[];
  /** Set when the task's signal fired: the last signal sent to the group. */
  signalled: NodeJS.Signals | undefined;
}

/** The task's outcome from how its command ended. */
function commandOutcome(task: Task, s: RunSettings, end: CommandEnd): TaskOutcome {
  const { exit } = end;
  let result = end.stdout;
  if (end.stdoutCut) result += `\n[baton: stdout truncated at ${s.resultLimit} bytes]`;
  const tail = end.stderrTail.length ? `; last stderr lines:\n${end.stderrTail.join('\n')}` : '';
  const how = exit.signal ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
  if (task.signal.aborted) {
    const sent = end.signalled === 'SIGKILL' ? `SIGTERM, then SIGKILL after ${s.grace / 1000} s` : 'SIGTERM';
    return outcome({
      status: 'failed',
      result: result || undefined,
      error: { code: 'stopped' satisfies BatonErrorCode, message: `the process group got ${sent}; the command ${how}${tail}` },
    });
  }
  if (exit.code === 0) return outcome({ status: 'succeeded', result });
  return outcome({
    status: 'failed',
    result: result || undefined,
    error: {
      code: exit.signal ? ('killed_by_signal' satisfies BatonErrorCode) : ('exit_code' satisfies BatonErrorCode),
      message: `the command ${how}${tail}`,
    },
  });
}

/** Run the command for one task; resolves once it has exited (and its group is gone). */
function runCommand(task: Task, s: RunSettings, groups: ProcessGroups): Promise<TaskOutcome> {
  return new Promise<TaskOutcome>((resolve) => {
    const { env, payloadFile } = commandEnv(task, s);
    const child = spawn(s.command, s.args, { cwd: s.cwd, env, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
    const pgid = child.pid;
    const stdoutChunks: Buffer[] = [];
    let stdoutBytes = 0;
    let stdoutCut = false;
    const stderrTail: string[] = [];
    let signalled: NodeJS.Signals | undefined;
    let killTimer: NodeJS.Timeout | undefined;
    let closeTimer: NodeJS.Timeout | undefined;
    let settled = false;

    const outLines = lineSplitter((l) => task.log(l, 'stdout'));
    const errLines = lineSplitter((l) => {
      task.log(l, 'stderr');
      stderrTail.push(l.length > 500 ? l.slice(0, 500) + '…' : l);
      if (stderrTail.length > STDERR_TAIL_LINES) stderrTail.shift();
    });

    const finish = (o: TaskOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(killTimer);
      clearTimeout(closeTimer);
      task.signal.removeEventListener('abort', onAbort);
      if (pgid !== undefined) groups.remove(pgid);
      if (payloadFile) {
        try {
          unlinkSync(payloadFile);
        } catch {
          /* already gone */
        }
      }
      resolve(o);
    };

    const onAbort = () => {
      if (pgid === undefined) return;
      signalled = 'SIGTERM';
      killGroup(pgid, 'SIGTERM');
      killTimer = setTimeout(() => {
        signalled = 'SIGKILL';
        killGroup(pgid, 'SIGKILL');
      }, s.grace);
    };

    child.on('error', (err: NodeJS.ErrnoException) => {
      // spawn failed (ENOENT, EACCES): there is no process to wait for.
      finish(
        outcome({
          status: 'failed',
          error: { code: 'spawn_failed' satisfies BatonErrorCode, message: `could not start '${s.command}': ${err.message}` },
        }),
      );
    });
    if (pgid === undefined) return;
    groups.add(pgid);
    if (task.signal.aborted) onAbort();
    else task.signal.addEventListener('abort', onAbort, { once: true });

    child.stdin.on('error', () => {}); // the command may not read stdin at all (EPIPE)
    child.stdin.end(task.message);
    child.stdout.on('data', (chunk: Buffer) => {
      outLines.write(chunk);
      if (stdoutBytes < s.resultLimit) {
        const room = s.resultLimit - stdoutBytes;
        stdoutChunks.push(chunk.length > room ? chunk.subarray(0, room) : chunk);
        if (chunk.length > room) stdoutCut = true;
        stdoutBytes += Math.min(chunk.length, room);
      } else stdoutCut = true;
    });
    child.stderr.on('data', (chunk: Buffer) => errLines.write(chunk));

    let exit: CommandEnd['exit'] | undefined;
    child.on('exit', (code, signal) => {
      exit = { code, signal };
      // The leader is gone; anything it left running in its group goes too.
      killGroup(pgid, 'SIGKILL');
      // A descendant that left the group (setsid) may hold the pipes open: stop waiting for them.
      closeTimer = setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
        done();
      }, 2_000);
    });
    child.on('close', () => done());

    function done() {
      if (settled || !exit) return;
      outLines.end();
      errLines.end();
      const stdout = Buffer.concat(stdoutChunks).toString('utf8');
      finish(commandOutcome(task, s, { exit, stdout, stdoutCut, stderrTail, signalled }));
    }
  });
}
