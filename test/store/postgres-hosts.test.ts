/**
 * Reading several hosts from BATON_DATABASE_URL as libpq does. Pure parsing, the same on both
 * stores' projects; choosing the writable host among real servers is test/server/pg-failover.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { movedHostError, parseHosts } from '../../src/store/postgres-hosts.ts';

describe('parseHosts', () => {
  it('reads every host with its port, the default port where none is given', () => {
    const list = parseHosts('postgres://u:p%40ss@db1:6432,db2,[::1]:5433/baton?target_session_attrs=read-write&sslmode=disable');
    expect(list.hosts).toEqual([
      { host: 'db1', port: 6432 },
      { host: 'db2', port: 5432 },
      { host: '::1', port: 5433 },
    ]);
    expect(list.readWrite).toBe(true);
    // One host's URL with every other setting kept, and target_session_attrs (libpq's, not pg's) left out.
    expect(list.url).toBe('postgres://u:p%40ss@db1:6432/baton?sslmode=disable');
  });

  it('asks for a writable host with several hosts even without target_session_attrs', () => {
    expect(parseHosts('postgresql://u@a:1,b:2/db').readWrite).toBe(true);
  });

  it('leaves a single-host URL as it is', () => {
    const list = parseHosts('postgres://postgres@127.0.0.1:5432/test');
    expect(list).toEqual({ hosts: [{ host: '127.0.0.1', port: 5432 }], url: 'postgres://postgres@127.0.0.1:5432/test', readWrite: false });
  });

  it('checks a single host for writes when target_session_attrs asks', () => {
    const list = parseHosts('postgres://u@h:5432/db?target_session_attrs=primary');
    expect(list.readWrite).toBe(true);
    expect(list.url).toBe('postgres://u@h:5432/db');
  });

  it('refuses a target_session_attrs that would let Baton write to a standby, naming it', () => {
    expect(() => parseHosts('postgres://u@a,b/db?target_session_attrs=any')).toThrow(/target_session_attrs must be read-write.*'any'/);
    expect(() => parseHosts('postgres://u@a,b/db?target_session_attrs=standby')).toThrow(/target_session_attrs/);
  });
});

describe('movedHostError', () => {
  it('re-resolves after a lost connection, a read-only refusal or a shutdown, not after an ordinary error', () => {
    expect(movedHostError(Object.assign(new Error('x'), { code: 'ECONNREFUSED' }))).toBe(true);
    expect(movedHostError(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(movedHostError({ code: '25006' })).toBe(true);
    expect(movedHostError({ code: '57P01' })).toBe(true);
    expect(movedHostError({ code: '08006' })).toBe(true);
    expect(movedHostError({ code: '23505' })).toBe(false);
    expect(movedHostError({ code: '40001' })).toBe(false);
  });
});
