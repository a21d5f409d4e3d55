import { useState, type FormEvent } from 'react';
import { AgentSparkline, CanaryHistory } from '../activity.tsx';
import { client, describe, historyStats, type Agent, type HistoryStats } from '../api.ts';
import { useLive, useLoad, useTick } from '../hooks.ts';
import { Empty, Failed, Loading, Section, Status, Time, link } from '../ui.tsx';
import { CanarySummary } from './Canary.tsx';
import { HoldBadge } from '../admission.tsx';

export function OverviewPage() {
  useTick();
  const agents = useLoad(() => client().listAgents(), []);
  const failures = useLoad(() => client().listExecutions({ status: 'failed', limit: 8 }), []);
  useLive(
    () => true,
    () => {
      agents.reload();
      failures.reload();
    },
    [],
  );
  return (
    <div className="grid">
      <Section title="Agents" actions={<CreateAgent onCreated={agents.reload} />}>
        {agents.error ? (
          <Failed what="agents" error={agents.error} retry={agents.reload} />
        ) : !agents.data ? (
          <Loading what="agents" />
        ) : agents.data.length === 0 ? (
          <Empty>
            No agents yet. Create one above, or with <code>baton agents create NAME</code>.
          </Empty>
        ) : (
          <AgentTable agents={agents.data} />
        )}
      </Section>
      <Section title="Recent failures">
        {failures.error ? (
          <Failed what="failures" error={failures.error} retry={failures.reload} />
        ) : !failures.data ? (
          <Loading what="failures" />
        ) : failures.data.executions.length === 0 ? (
          <Empty>No failed executions.</Empty>
        ) : (
          <ul className="list">
            {failures.data.executions.map((e) => (
              <li key={e.id}>
                <a href={link('executions', e.id)}>{e.id}</a> <span className="muted">{e.agent}</span> <Status status={e.status} />{' '}
                <span className="err">{e.error?.code ?? ''}</span> <Time iso={e.completed_at ?? e.created_at} />
              </li>
            ))}
          </ul>
        )}
      </Section>
      <Section title="Canary">
        <CanarySummary />
        <CanaryHistory />
      </Section>
      <Section title="History">
        <HistorySummary />
      </Section>
    </div>
  );
}

function AgentTable({ agents }: { agents: Agent[] }) {
  return (
    <div className="table-wrap">
      <table>
        <thead>
          <tr>
            <th>Agent</th>
            <th>Running / cap</th>
            <th>Queued / backlog</th>
            <th>Delivery</th>
            <th>Last hour</th>
          </tr>
        </thead>
        <tbody>
          {agents.map((a) => (
            <tr key={a.name} data-agent={a.name}>
              <td>
                <a href={link('agents', a.name)}>{a.name}</a>
                <HoldBadge agent={a} />
              </td>
              <td className={a.running >= a.max_parallel && a.max_parallel > 0 ? 'full' : ''}>
                {a.running} / {a.max_parallel}
              </td>
              <td>
                {a.queued} / {a.max_backlog}
              </td>
              <td>{a.delivery}</td>
              <td className="spark-cell">
                <AgentSparkline agent={a.name} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function CreateAgent({ onCreated }: { onCreated: () => void }) {
  const [open, setOpen] = useState(false);
  const [name, setName] = useState('');
  const [cap, setCap] = useState('1');
  const [error, setError] = useState<string>();
  if (!open)
    return (
      <button className="secondary" onClick={() => setOpen(true)}>
        New agent
      </button>
    );
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError(undefined);
    try {
      await client().createAgent({ name: name.trim(), max_parallel: Number(cap) });
      setOpen(false);
      setName('');
      onCreated();
      location.hash = link('agents', name.trim());
    } catch (err) {
      setError(describe(err));
    }
  };
  return (
    <form className="inline-form" onSubmit={submit} aria-label="new agent">
      <input name="agent-name" placeholder="name (a-z, 0-9, -)" value={name} onChange={(e) => setName(e.target.value)} required />
      <label className="small">
        max parallel <input name="max-parallel" type="number" min={0} value={cap} onChange={(e) => setCap(e.target.value)} />
      </label>
      <button type="submit">Create</button>
      <button type="button" className="link" onClick={() => setOpen(false)}>
        Cancel
      </button>
      {error && (
        <p className="state error" role="alert">
          {error}
        </p>
      )}
    </form>
  );
}

const rows = (n: number | null) => (n === null ? '?' : `~${n.toLocaleString()}`);
const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;

/** History size, oldest row, retention settings and the last prune (GET /v1/history). */
function HistorySummary() {
  const h = useLoad(historyStats, []);
  if (h.error) return <Failed what="history" error={h.error} retry={h.reload} />;
  if (h.data === undefined) return <Loading what="history" />;
  const s: HistoryStats = h.data;
  const p = s.last_prune;
  return (
    <dl className="history" aria-label="history">
      <dt>Size</dt>
      <dd>
        {rows(s.rows.executions)} executions · {rows(s.rows.execution_events)} events · {rows(s.rows.execution_logs)} log lines ·{' '}
        {rows(s.rows.audit_log)} audit rows <span className="muted small">(estimates)</span> · {mib(s.bytes)}
        {s.free_bytes ? ` (${mib(s.free_bytes)} free)` : ''}
      </dd>
      <dt>Oldest</dt>
      <dd>
        finished <Time iso={s.oldest_completed_at} /> · created <Time iso={s.oldest_created_at} />
      </dd>
      <dt>Retention</dt>
      <dd>
        {s.retention.days > 0 ? `executions ${s.retention.days} days` : 'executions kept forever'} ·{' '}
        {s.retention.audit_days > 0 ? `audit ${s.retention.audit_days} days` : 'audit kept forever'} ·{' '}
        {s.retention.archive_dir ? (
          <>
            archived to <code>{s.retention.archive_dir}</code>
          </>
        ) : (
          'no archive'
        )}
      </dd>
      <dt>Last prune</dt>
      <dd>
        {p.completed_at === null ? (
          'never'
        ) : (
          <>
            <Time iso={p.completed_at} />: {p.executions ?? 0} executions, {p.audit ?? 0} audit rows removed in{' '}
            {((p.duration_ms ?? 0) / 1000).toFixed(1)} s
          </>
        )}
        {p.error ? <span className="err"> · last sweep failed: {p.error}</span> : null}
      </dd>
    </dl>
  );
}
