import type { FastifyBaseLogger } from 'fastify';

type Bindings = Record<string, unknown>;
type Log = (...args: unknown[]) => void;

/**
 * A request's logger: pino's child made on first use. Its methods are the prototype's, so making
 * one per request is one small object, not a closure per method.
 */
class LazyRequestLogger {
  private made: FastifyBaseLogger | undefined;
  constructor(
    private readonly logger: FastifyBaseLogger,
    private readonly bindings: Bindings,
    private readonly opts: object,
  ) {}
  private own(): FastifyBaseLogger {
    return (this.made ??= this.logger.child(this.bindings, this.opts));
  }
  get level(): string {
    return this.own().level;
  }
  set level(level: string) {
    this.own().level = level;
  }
  fatal(...args: unknown[]): void {
    (this.own().fatal as Log)(...args);
  }
  error(...args: unknown[]): void {
    (this.own().error as Log)(...args);
  }
  warn(...args: unknown[]): void {
    (this.own().warn as Log)(...args);
  }
  info(...args: unknown[]): void {
    (this.own().info as Log)(...args);
  }
  debug(...args: unknown[]): void {
    (this.own().debug as Log)(...args);
  }
  trace(...args: unknown[]): void {
    (this.own().trace as Log)(...args);
  }
  silent(...args: unknown[]): void {
    (this.own().silent as Log)(...args);
  }
  child(more: Bindings, options?: object): FastifyBaseLogger {
    return this.own().child(more, options);
  }
}

/**
 * Fastify's `childLoggerFactory`: a request's logger (its `reqId` bound) made only when the
 * request logs something. pino's child() runs the redaction paths over the bindings each time it
 * is called (parsing every path), a few microseconds on every request, and on the worker protocol
 * almost no request logs. The first call of any method makes the child, and every later call goes
 * to it, so a line logged through it is the line pino's child would have written.
 */
export function lazyRequestLogger(logger: FastifyBaseLogger, bindings: Bindings, opts: object): FastifyBaseLogger {
  return new LazyRequestLogger(logger, bindings, opts) as unknown as FastifyBaseLogger;
}
