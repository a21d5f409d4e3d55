/**
 * A request's logger is made only when the request logs: the line it writes is the one pino's
 * child would have written (the request id bound, credentials redacted), and a request that logs
 * nothing never makes it.
 */
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { lazyRequestLogger } from '../../src/api/request-logger.ts';
import { createLogger } from '../../src/server/logger.ts';

function capture() {
  const out: string[] = [];
  const destination = new Writable({
    write(chunk, _enc, done) {
      out.push(String(chunk));
      done();
    },
  });
  return { out, logger: createLogger({ level: 'debug', format: 'json', destination }) };
}

describe('lazyRequestLogger', () => {
  it('writes what the child would, the request id bound and secrets redacted', () => {
    const { out, logger } = capture();
    const lazy = lazyRequestLogger(logger, { reqId: 'req-7' }, {});
    lazy.warn({ detail: { key: 'bt_secret' } }, 'claim after completion failed');
    lazy.child({ more: 1 }).error('again');
    const [first, second] = out.map((l) => JSON.parse(l));
    expect(first).toMatchObject({ level: 40, reqId: 'req-7', msg: 'claim after completion failed', detail: { key: '[Redacted]' } });
    expect(second).toMatchObject({ level: 50, reqId: 'req-7', more: 1, msg: 'again' });
    expect(lazy.level).toBe('debug');
  });

  it('makes no child while nothing is logged', () => {
    const { logger } = capture();
    let made = 0;
    const counting = Object.assign(Object.create(logger), {
      child: (...a: Parameters<typeof logger.child>) => {
        made++;
        return logger.child(...a);
      },
    });
    const lazy = lazyRequestLogger(counting, { reqId: 'req-8' }, {});
    expect(made).toBe(0);
    lazy.debug('now');
    lazy.info('and again');
    expect(made).toBe(1);
  });
});
