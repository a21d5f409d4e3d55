/**
 * `baton up`'s logger: JSON lines for a collector, or pino-pretty's readable lines for a person at
 * a terminal. Which one is BATON_LOG_FORMAT's choice (src/config.ts); unset, a terminal on
 * stdout gets pretty and anything else (a pipe, a file, a container's log driver) gets JSON.
 * Redaction is pino's, applied before either format writes, so a secret never reaches either.
 */
import pino, { type DestinationStream, type Logger } from 'pino';
import pretty from 'pino-pretty';
import type { LogFormat, LogLevel } from '../config.ts';

/** Log paths whose values are credentials: replaced by `[Redacted]` in every format. */
export const REDACT_PATHS = Object.freeze(['req.headers.authorization', '*.key', '*.secret']);

/** The format to use: the configured one, or pretty only when stdout is a terminal. */
export function resolveLogFormat(configured: LogFormat | undefined, stdoutIsTTY = process.stdout.isTTY === true): LogFormat {
  return configured ?? (stdoutIsTTY ? 'pretty' : 'json');
}

export interface LoggerOptions {
  level: LogLevel;
  format: LogFormat;
  /** Where lines go (default stdout); tests pass a stream. */
  destination?: DestinationStream;
}

export function createLogger(opts: LoggerOptions): Logger {
  const base = { level: opts.level, redact: [...REDACT_PATHS] };
  if (opts.format === 'json') return opts.destination ? pino(base, opts.destination) : pino(base);
  const stream = pretty({
    // Synchronous, like pino's own stdout: a line logged just before a crash is not lost in a buffer.
    sync: true,
    destination: opts.destination ?? 1,
    translateTime: 'SYS:HH:MM:ss.l',
    // One process per terminal: its pid and host name are noise on every line.
    ignore: 'pid,hostname',
    // A line per event, its fields after the message, so a terminal reads like a log, not a dump.
    singleLine: true,
  });
  return pino(base, stream);
}
