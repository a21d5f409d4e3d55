/**
 * Flow control on the dashboard (docs/concepts.md, "Concurrency keys" and "Pools"): an agent's
 * flow limits and live keys, pool reads, and the flow parts of "why is it waiting?".
 */
import { describeThrottle, type Throttle } from '../../src/domain/throttle.ts';
import { client, type Agent, type ExecutionDetail } from './api.ts';
import { useLive, useLoad } from './hooks.ts';
import { Empty, Failed, Loading, Section, Time, link } from './ui.tsx';

type Waiting = NonNullable<ExecutionDetail['waiting']>;

/** Keys shown on the agent page: one page of the live keys, in key order. */
export const LIVE_KEYS_SHOWN = 50;

/** Each waiting reason in words, for people (the code stays visible beside it). */
export const WAITING_LABELS: Record<Waiting['reason'], string> = {
  run_after: 'not due yet',
  agent_paused: 'agent paused',
  lapse_hold: 'held after lapsed leases',
  budget_spent: 'agent budget spent',
  pool_budget_spent: 'pool budget spent',
  breaker_open: 'circuit breaker open',
  serial_busy: 'previous run still going',
  seats_taken: 'all agent seats taken',
  throttled: 'agent throttled',
  pool_full: 'pool full',
  pool_turn: "another agent's turn in the pool",
  pool_throttled: 'pool throttled',
  key_busy: 'key busy',
  key_throttled: 'key throttled',
  no_worker: 'no worker',
  push_failing: 'delivery failing',
  next_in_line: 'next in line',
};

export const throttleWords = (t: Throttle | null | undefined) => (t ? describeThrottle(t) : 'none');

/** The agent page's flow-limit facts: per-key caps and throttle, its own throttle, its pools. */
export function FlowFacts({ agent: a }: { agent: Agent }) {
  const overrides = Object.entries(a.keys.key_overrides ?? {});
  return (
    <>
      <dt>Key cap</dt>
      <dd data-field="key-cap">
        {a.keys.key_max_parallel === null ? 'none' : `${a.keys.key_max_parallel} running per key`}
        {overrides.length > 0 && (
          <span data-field="key-overrides">
            {' '}
            · overrides:{' '}
            {overrides.map(([k, cap], i) => (
              <span key={k}>
                {i > 0 && ', '}
                <span className="mono">{k}</span> {cap}
              </span>
            ))}
          </span>
        )}
      </dd>
      <dt>Key throttle</dt>
      <dd data-field="key-throttle">{a.keys.key_throttle ? `${describeThrottle(a.keys.key_throttle)}, each key` : 'none'}</dd>
      <dt>Throttle</dt>
      <dd data-field="throttle">{throttleWords(a.throttle)}</dd>
      <dt>Pools</dt>
      <dd data-field="pools">
        {a.pools.length === 0
          ? 'none'
          : a.pools.map((p, i) => (
              <span key={p}>
                {i > 0 && ', '}
                <a href={link('pools', p)}>{p}</a>
              </span>
            ))}
      </dd>
    </>
  );
}

/** The agent page's live keys: seats in use / cap, queue depth, throttle state (one bounded page). */
export function LiveKeysSection({ agent }: { agent: string }) {
  const keys = useLoad(() => client().agentKeys(agent, { limit: LIVE_KEYS_SHOWN }), [agent]);
  useLive((e) => e.agent === agent, keys.reload, [agent]);
  return (
    <Section title="Live keys">
      {keys.error ? (
        <Failed what="live keys" error={keys.error} retry={keys.reload} />
      ) : !keys.data ? (
        <Loading what="live keys" />
      ) : keys.data.keys.length === 0 ? (
        <Empty>No key has queued or running work.</Empty>
      ) : (
        <>
          <table className="live-keys">
            <thead>
              <tr>
                <th>key</th>
                <th>running / cap</th>
                <th>queued</th>
                <th>throttle</th>
              </tr>
            </thead>
            <tbody>
              {keys.data.keys.map((k) => (
                <tr key={k.key} data-key={k.key}>
                  <td className="mono">{k.key}</td>
                  <td data-field="key-running">
                    {k.running} / {k.max_parallel ?? '∞'}
                  </td>
                  <td data-field="key-queued">{k.queued}</td>
                  <td data-field="key-throttled">
                    {k.throttled_until ? (
                      <>
                        closed until <Time iso={k.throttled_until} />
                      </>
                    ) : (
                      'open'
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {keys.data.next_cursor && (
            <p className="muted small">
              The first {LIVE_KEYS_SHOWN} keys in key order; <code>baton agents keys {agent}</code> lists them all.
            </p>
          )}
        </>
      )}
    </Section>
  );
}

/** The flow facts of an execution's "Why is it waiting?" (inside its facts list): the limiting key, agent throttle or pool. */
export function FlowWaiting({ waiting: w }: { waiting: Waiting }) {
  return (
    <>
      {w.key && (
        <>
          <dt>Key</dt>
          <dd className="mono">{w.key.key}</dd>
          <dt>Key seats</dt>
          <dd data-waiting-key={w.key.key}>
            {w.key.running} / {w.key.max_parallel ?? '∞'}
            {w.key.holders.length > 0 && (
              <>
                {' '}
                held by{' '}
                {w.key.holders.map((h, i) => (
                  <span key={h.execution_id}>
                    {i > 0 && ', '}
                    <a className="mono" href={link('executions', h.execution_id)}>
                      {h.execution_id}
                    </a>
                  </span>
                ))}
              </>
            )}
          </dd>
          <dt>Key throttle</dt>
          <dd>
            {w.key.throttle ?? 'none'}
            {w.key.next_start_at && (
              <>
                {' '}
                · next start <Time iso={w.key.next_start_at} />
              </>
            )}
          </dd>
        </>
      )}
      {w.throttle && (
        <>
          <dt>Agent throttle</dt>
          <dd data-waiting-throttle>
            {describeThrottle(w.throttle)} · next start <Time iso={w.throttle.next_admit_at} />
          </dd>
        </>
      )}
      {w.pool && (
        <>
          <dt>Pool</dt>
          <dd>
            <a href={link('pools', w.pool.name)}>{w.pool.name}</a>
          </dd>
          <dt>Pool seats</dt>
          <dd data-waiting-pool={w.pool.name}>
            {w.pool.in_use} / {w.pool.max_parallel ?? '∞'}
            {w.pool.holders.length > 0 && (
              <>
                {' '}
                held by{' '}
                {w.pool.holders.map((h, i) => (
                  <span key={h.execution_id}>
                    {i > 0 && ', '}
                    <a className="mono" href={link('executions', h.execution_id)}>
                      {h.execution_id}
                    </a>{' '}
                    ({h.agent})
                  </span>
                ))}
              </>
            )}
          </dd>
          {w.pool.throttle && (
            <>
              <dt>Pool throttle</dt>
              <dd>
                {describeThrottle(w.pool.throttle)} · next start <Time iso={w.pool.throttle.next_admit_at} />
              </dd>
            </>
          )}
        </>
      )}
    </>
  );
}
