/** Pause and resume an agent, the overview's badge of what holds it, and an execution's "why is it waiting?" panel. */
import { useState, type FormEvent } from 'react';
import { client, describe, type Agent, type ExecutionDetail } from './api.ts';
import { FlowWaiting, WAITING_LABELS } from './flow.tsx';
import { Section, Time, link } from './ui.tsx';

type Waiting = NonNullable<ExecutionDetail['waiting']>;

/** Each hold's badge text on the overview (ADMISSION_HOLDS). */
const HOLD_LABELS: Record<NonNullable<Agent['hold']>['reason'], string> = {
  agent_paused: 'paused',
  lapse_hold: 'held',
  budget_spent: 'budget spent',
  pool_budget_spent: 'pool budget spent',
  breaker_open: 'breaker open',
};

/** The overview's marker under a held agent's name: what stops it admitting, in words (nothing while it admits). */
export function HoldBadge({ agent }: { agent: Agent }) {
  const h = agent.hold;
  if (!h) return null;
  const label = h.reason === 'breaker_open' && h.until === null ? 'breaker half-open' : HOLD_LABELS[h.reason];
  return (
    <div className="hold" data-hold={h.reason}>
      <span className="badge held">{label}</span> <span className="small muted">admits nothing: {h.summary}</span>
    </div>
  );
}

/** The agent page's header action: Pause (asks why) or Resume, with who paused it, why and since when. */
export function PauseControl({ agent, onChanged }: { agent: Agent; onChanged: () => void }) {
  const [asking, setAsking] = useState(false);
  const [reason, setReason] = useState('');
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const act = async (run: () => Promise<unknown>) => {
    setBusy(true);
    setError(undefined);
    try {
      await run();
      setAsking(false);
      setReason('');
      onChanged();
    } catch (err) {
      setError(describe(err));
    } finally {
      setBusy(false);
    }
  };
  const pause = (e: FormEvent) => {
    e.preventDefault();
    void act(() => client().pauseAgent(agent.name, reason));
  };
  return (
    <div className="pause-control">
      {agent.paused ? (
        <button disabled={busy} onClick={() => void act(() => client().resumeAgent(agent.name))}>
          Resume
        </button>
      ) : asking ? (
        <form className="inline-form" onSubmit={pause} aria-label="pause agent">
          <input
            name="pause-reason"
            placeholder="why pause? (shown to everyone waiting)"
            value={reason}
            maxLength={1000}
            onChange={(e) => setReason(e.target.value)}
            required
            autoFocus
          />
          <button type="submit" disabled={busy}>
            Pause
          </button>
          <button type="button" className="link" onClick={() => setAsking(false)}>
            Cancel
          </button>
        </form>
      ) : (
        <button className="secondary" onClick={() => setAsking(true)}>
          Pause
        </button>
      )}
      {error && (
        <p className="state error" role="alert">
          {error}
        </p>
      )}
    </div>
  );
}

/** The agent page's "Paused" fact (nothing while it admits). */
export function PausedFact({ agent }: { agent: Agent }) {
  if (!agent.paused) return null;
  return (
    <>
      <dt>Paused</dt>
      <dd data-field="paused">
        <strong>admits nothing</strong> since <Time iso={agent.paused.since} /> by <span className="mono">{agent.paused.by}</span>:{' '}
        {agent.paused.reason}
      </dd>
    </>
  );
}

/** The agent page's "Held" fact after a shared-cause lapse (docs/concepts.md; nothing otherwise). */
export function LapseHoldFact({ agent }: { agent: Agent }) {
  if (!agent.lapse_hold) return null;
  return (
    <>
      <dt>Held</dt>
      <dd data-field="lapse_hold">
        <strong>admits nothing</strong> since <Time iso={agent.lapse_hold.since} />: {agent.lapse_hold.lapsed} leases lapsed at once; ends
        when one of its workers claims or heartbeats
      </dd>
    </>
  );
}

/** The agent page's circuit breaker line (docs/concepts.md, "Circuit breaker"), with Close while it is not closed. */
export function BreakerFact({ agent, onChanged }: { agent: Agent; onChanged: () => void }) {
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const b = agent.breaker;
  if (!b) return null;
  const close = async () => {
    setBusy(true);
    setError(undefined);
    try {
      await client().closeBreaker(agent.name);
      onChanged();
    } catch (err) {
      setError(describe(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <>
      <dt>Breaker</dt>
      <dd data-field="breaker" data-breaker={b.state}>
        {b.state === 'closed' ? (
          `closed (${b.consecutive_failures} failures in a row; ${b.recent.failures}/${b.recent.outcomes} recent)`
        ) : b.state === 'open' ? (
          <>
            <strong>open</strong>: admits nothing until <Time iso={b.until} />, then one probe
          </>
        ) : (
          <>
            <strong>half-open</strong>: probe{' '}
            {b.probe_execution_id ? <a href={link('executions', b.probe_execution_id)}>{b.probe_execution_id}</a> : 'at the next claim'}{' '}
            decides
          </>
        )}{' '}
        {b.state !== 'closed' && (
          <button className="secondary" disabled={busy} onClick={() => void close()}>
            Close breaker
          </button>
        )}
        {error && (
          <span className="state error" role="alert">
            {error}
          </span>
        )}
      </dd>
    </>
  );
}

/** The execution page's "Why is it waiting?" panel, for a queued execution. */
export function WaitingPanel({ waiting }: { waiting: ExecutionDetail['waiting'] }) {
  if (!waiting) return null;
  const w: Waiting = waiting;
  return (
    <Section title="Why is it waiting?">
      <p data-waiting={w.reason}>{w.summary}</p>
      <dl className="facts">
        <dt>Reason</dt>
        <dd data-field="waiting-reason">
          <strong>{WAITING_LABELS[w.reason]}</strong> <span className="mono muted">{w.reason}</span>
        </dd>
        <dt>Ahead in queue</dt>
        <dd>
          {w.ahead}
          {w.ahead_capped ? '+' : ''}
        </dd>
        {w.last_claim_at !== null || w.reason === 'no_worker' ? (
          <>
            <dt>Last claim</dt>
            <dd>{w.last_claim_at ? <Time iso={w.last_claim_at} /> : 'never'}</dd>
          </>
        ) : null}
        <dt>Backlog expiry</dt>
        <dd>
          <Time iso={w.backlog_expires_at} />
        </dd>
        <FlowWaiting waiting={w} />
      </dl>
      {w.seats && (
        <table className="seat-holders">
          <thead>
            <tr>
              <th>seat held by</th>
              <th>worker</th>
              <th>running</th>
              <th>lease until</th>
            </tr>
          </thead>
          <tbody>
            {w.seats.holders.map((h) => (
              <tr key={h.execution_id}>
                <td>
                  <a className="mono" href={link('executions', h.execution_id)}>
                    {h.execution_id}
                  </a>
                </td>
                <td className="mono">{h.lease_owner ?? '—'}</td>
                <td>{h.running_seconds === null ? '—' : `${h.running_seconds} s`}</td>
                <td>
                  <Time iso={h.lease_expires_at} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {w.push_error && (
        <p className="state error">
          Last delivery <a href={link('executions', w.push_error.execution_id)}>{w.push_error.execution_id}</a>:{' '}
          <strong>{w.push_error.code}</strong> {w.push_error.message}
        </p>
      )}
    </Section>
  );
}
