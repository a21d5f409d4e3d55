/**
 * Composition on the dashboard: an agent's subscriptions (chains), and where an execution came
 * from and what it started (the execution page's provenance panel).
 */
import { useState, type FormEvent } from 'react';
import { SUBSCRIPTION_ON } from '../../src/domain/chains.ts';
import { client, describe, type ExecutionDetail } from './api.ts';
import { useLoad } from './hooks.ts';
import { Empty, Failed, Loading, Section, Time, link } from './ui.tsx';

export type { Subscription } from '../../src/client.ts';
import type { Subscription, SubscriptionListItem } from '../../src/client.ts';

/** The agent page's "Subscriptions": outcomes of this agent that start work elsewhere, and the other way round. */
export function SubscriptionsSection({ agent }: { agent: string }) {
  const subs = useLoad(() => client().listSubscriptions(agent), [agent]);
  return (
    <Section title="Subscriptions" actions={<CreateSubscription source={agent} onCreated={subs.reload} />}>
      {subs.error ? (
        <Failed what="subscriptions" error={subs.error} retry={subs.reload} />
      ) : subs.data === undefined ? (
        <Loading what="subscriptions" />
      ) : subs.data.length === 0 ? (
        <Empty>No subscriptions: no outcome of {agent} starts work elsewhere, and nothing starts work on it.</Empty>
      ) : (
        <ul className="list">
          {subs.data.map((s) => (
            <SubscriptionItem key={s.id} s={s} agent={agent} onChanged={subs.reload} />
          ))}
        </ul>
      )}
    </Section>
  );
}

function SubscriptionItem({ s, agent, onChanged }: { s: SubscriptionListItem; agent: string; onChanged: () => void }) {
  const [msg, setMsg] = useState<string>();
  const act = async (what: () => Promise<unknown>) => {
    setMsg(undefined);
    try {
      await what();
      onChanged();
    } catch (err) {
      setMsg(describe(err));
    }
  };
  const filters = [s.filter.schedule_id && `schedule ${s.filter.schedule_id}`, s.filter.trigger && `trigger ${s.filter.trigger}`].filter(
    Boolean,
  );
  return (
    <li data-subscription={s.id}>
      when {s.source_agent === agent ? <strong>{s.source_agent}</strong> : <a href={link('agents', s.source_agent)}>{s.source_agent}</a>}{' '}
      ends <strong>{s.on === 'any' ? 'in any way' : s.on}</strong>
      {filters.length > 0 && <span className="muted"> ({filters.join(', ')})</span>} → start a task on{' '}
      {s.target_agent === agent ? <strong>{s.target_agent}</strong> : <a href={link('agents', s.target_agent)}>{s.target_agent}</a>}{' '}
      <span className="muted">
        “{s.message}”{s.enabled ? '' : ' (disabled)'}
      </span>{' '}
      <span className="mono muted small">{s.id}</span>{' '}
      <button className="link" onClick={() => act(() => client().updateSubscription(s.id, { enabled: !s.enabled }))}>
        {s.enabled ? 'Disable' : 'Enable'}
      </button>{' '}
      <button className="link danger" onClick={() => act(() => client().deleteSubscription(s.id))}>
        Delete
      </button>
      {msg && (
        <span className="state error small" role="alert">
          {' '}
          {msg}
        </span>
      )}
    </li>
  );
}

function CreateSubscription({ source, onCreated }: { source: string; onCreated: () => void }) {
  const [open, setOpen] = useState(false);
  const [f, setF] = useState({ target_agent: '', on: 'succeeded' as Subscription['on'], message: 'Follow up on {{source.id}}' });
  const [error, setError] = useState<string>();
  if (!open)
    return (
      <button className="secondary" onClick={() => setOpen(true)}>
        New subscription
      </button>
    );
  const set = (k: keyof typeof f) => (e: { target: { value: string } }) => setF({ ...f, [k]: e.target.value });
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError(undefined);
    try {
      await client().createSubscription({ source_agent: source, ...f });
      setOpen(false);
      onCreated();
    } catch (err) {
      setError(describe(err));
    }
  };
  return (
    <form className="stack-form" onSubmit={submit} aria-label="new subscription">
      <label>
        When {source} ends{' '}
        <select name="subscription-on" value={f.on} onChange={set('on')}>
          {SUBSCRIPTION_ON.map((o) => (
            <option key={o} value={o}>
              {o}
            </option>
          ))}
        </select>
      </label>
      <label>
        start a task on <input name="subscription-target" value={f.target_agent} onChange={set('target_agent')} required />
      </label>
      <label>
        Message <input name="subscription-message" value={f.message} onChange={set('message')} required />{' '}
        <span className="muted small">
          templates: {'{{source.id}}'}, {'{{source.status}}'}, {'{{source.result#/pointer}}'}, {'{{source.error.message}}'}
        </span>
      </label>
      <div>
        <button type="submit">Create subscription</button>{' '}
        <button type="button" className="link" onClick={() => setOpen(false)}>
          Cancel
        </button>
      </div>
      {error && (
        <p className="state error" role="alert">
          {error}
        </p>
      )}
    </form>
  );
}

/** Where an execution came from (a chain's source, a group) and what its outcome started. Nothing for plain work. */
export function Provenance({ x }: { x: ExecutionDetail }) {
  const started = x.started ?? [];
  if (!x.caused_by && !x.group_id && started.length === 0) return null;
  return (
    <Section title="Composition">
      <dl className="facts">
        {x.caused_by && (
          <>
            <dt>Started by</dt>
            <dd>
              the outcome of <a href={link('executions', x.caused_by)}>{x.caused_by}</a>
              {x.subscription_id && (
                <>
                  {' '}
                  through subscription <span className="mono">{x.subscription_id}</span>
                </>
              )}{' '}
              <span className="muted">(chain depth {x.chain_depth})</span>
            </dd>
          </>
        )}
        {x.group_id && (
          <>
            <dt>Group</dt>
            <dd>
              <a href={link('groups', x.group_id)}>{x.group_id}</a>{' '}
              <span className="muted">{x.group_index === null ? '(its join)' : `(member ${x.group_index})`}</span>
            </dd>
          </>
        )}
      </dl>
      {started.length > 0 && (
        <>
          <h3>Its outcome started</h3>
          <ul className="list" aria-label="started">
            {started.map((s) => (
              <li key={s.subscription_id} data-started={s.execution_id ?? s.refused ?? ''}>
                {s.execution_id ? (
                  <a href={link('executions', s.execution_id)}>{s.execution_id}</a>
                ) : (
                  <span className="status status-failed">refused: {s.refused}</span>
                )}{' '}
                <span className="muted">
                  via <span className="mono">{s.subscription_id}</span> · <Time iso={s.at} />
                </span>
              </li>
            ))}
          </ul>
        </>
      )}
    </Section>
  );
}
