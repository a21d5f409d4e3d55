import type { FastifyBaseLogger } from 'fastify';

type Bindings = Record<string, unknown>;
type LogMethod = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

/**
 * Fastify's `childLoggerFactory`: a request's logger (its `reqId` bound) made only when the
 * request logs something. pino's child() runs the redaction paths over the bindings each time it
 * is called (parsing every path), a few microseconds on every request, and on the worker protocol
 * almost no request logs. The first call of any method makes the child, and every later call goes
 * to it, so a line logged through it is the line pino's child would have written.
 */
export function lazyRequestLogger(logger: FastifyBaseLogger, bindings: Bindings, opts: object): FastifyBaseLogger {
  let child: FastifyBaseLogger | undefined;
  const made = () => (child ??= logger.child(bindings, opts));
  const method =
    (name: LogMethod) =>
    (...args: unknown[]) =>
      (made()[name] as (...a: unknown[]) => void)(...args);
  return {
    get level() {
      return made().level;
    },
    set level(level: string) {
      made().level = level;
    },
    fatal: method('fatal'),
    error: method('error'),
    warn: method('warn'),
    info: method('info'),
    debug: method('debug'),
    trace: method('trace'),
    silent: method('silent'),
    child: (more: Bindings, options?: object) => made().child(more, options),
  } as FastifyBaseLogger;
}
