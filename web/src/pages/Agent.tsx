import { useState, type FormEvent } from 'react';
import { AgentCharts, SeatTimeline } from '../activity.tsx';
import { client, describe, type Agent } from '../api.ts';
import { cronInWords } from '../cron.ts';
import { useLive, useLoad, useTick } from '../hooks.ts';
import { createSchedule, listSchedules, listWebhooks, RunNow } from '../schedules.tsx';
import { Empty, Failed, Loading, Section, Time, link } from '../ui.tsx';
import { ExecutionTable } from './Executions.tsx';
import { BreakerFact, LapseHoldFact, PauseControl, PausedFact } from '../admission.tsx';
import { SubscriptionsSection } from '../composition.tsx';
import { FlowFacts, LiveKeysSection } from '../flow.tsx';

type Budget = Awaited<ReturnType<ReturnType<typeof client>['agentBudget']>>;

export function AgentPage({ name }: { name: string }) {
  useTick();
  const agent = useLoad(() => client().getAgent(name), [name]);
  const schedules = useLoad(() => listSchedules(name), [name]);
  const webhooks = useLoad(() => listWebhooks(name), [name]);
  const executions = useLoad(() => client().listExecutions({ agent: name, limit: 25 }), [name]);
  const budget = useLoad(() => client().agentBudget(name), [name]);
  useLive(
    (e) => e.agent === name,
    () => {
      agent.reload();
      executions.reload();
      budget.reload();
    },
    [name],
  );
  if (agent.error) return <Failed what={`agent ${name}`} error={agent.error} retry={agent.reload} />;
  if (!agent.data) return <Loading what={`agent ${name}`} />;
  const a = agent.data;
  return (
    <div className="grid">
      <Section title={`Agent ${a.name}`} actions={<PauseControl agent={a} onChanged={agent.reload} />}>
        <AgentFacts agent={a} budget={budget.data} onChanged={agent.reload} />
        <RunTask agent={a.name} onStarted={executions.reload} />
        <EditSettings agent={a} onSaved={agent.reload} />
      </Section>
      <LiveKeysSection agent={a.name} />
      <AgentCharts agent={a.name} />
      <SeatTimeline agent={a.name} />
      <Section title="Schedules" actions={<CreateSchedule agent={a.name} onCreated={schedules.reload} />}>
        {schedules.error ? (
          <Failed what="schedules" error={schedules.error} retry={schedules.reload} />
        ) : schedules.data === undefined ? (
          <Loading what="schedules" />
        ) : schedules.data.length === 0 ? (
          <Empty>No schedules for {a.name}.</Empty>
        ) : (
          <ul className="list">
            {schedules.data.map((s) => (
              <li key={s.id} data-schedule={s.id}>
                <strong>{s.name}</strong> — {cronInWords(s.cron)}{' '}
                <span className="muted">
                  ({s.timezone}
                  {s.enabled ? '' : ', disabled'})
                </span>{' '}
                · next <Time iso={s.next_run_at} />
                <RunNow schedule={s} />
              </li>
            ))}
          </ul>
        )}
      </Section>
      <SubscriptionsSection agent={a.name} />
      <Section title="Webhooks">
        {webhooks.error ? (
          <Failed what="webhooks" error={webhooks.error} retry={webhooks.reload} />
        ) : webhooks.data === undefined ? (
          <Loading what="webhooks" />
        ) : webhooks.data.length === 0 ? (
          <Empty>
            No webhooks for {a.name}. Create one with <code>baton webhooks create</code>.
          </Empty>
        ) : (
          <ul className="list">
            {webhooks.data.map((w) => (
              <li key={w.id}>
                <strong>{w.name}</strong> <span className="mono muted">{w.id}</span> {w.enabled ? '' : '(disabled)'} · last delivery{' '}
                <Time iso={w.last_delivery_at} />
              </li>
            ))}
          </ul>
        )}
      </Section>
      <Section wide title="Executions" actions={<a href={`#/executions?agent=${encodeURIComponent(a.name)}`}>all</a>}>
        {executions.error ? (
          <Failed what="executions" error={executions.error} retry={executions.reload} />
        ) : !executions.data ? (
          <Loading what="executions" />
        ) : executions.data.executions.length === 0 ? (
          <Empty>No executions yet.</Empty>
        ) : (
          <ExecutionTable rows={executions.data.executions} />
        )}
      </Section>
    </div>
  );
}

/** What the agent is: its holds, budget, seats, backlog, delivery and contract. */
function AgentFacts({ agent: a, budget, onChanged }: { agent: Agent; budget: Budget | undefined; onChanged: () => void }) {
  return (
    <dl className="facts">
      <PausedFact agent={a} />
      <LapseHoldFact agent={a} />
      <BreakerFact agent={a} onChanged={onChanged} />
      {budget && budget.limits.length > 0 && (
        <>
          <dt>Budget</dt>
          <dd data-field="budget">
            {budget.spent && <strong>spent, admits nothing: </strong>}
            {budget.limits.map((l) => (
              <span key={`${l.metric}/${l.window}`}>
                {l.metric} {l.spent} / {l.limit} per {l.window} (resets <Time iso={l.resets_at} />){' '}
              </span>
            ))}
          </dd>
        </>
      )}
      <dt>Running / cap</dt>
      <dd data-field="running">
        {a.running} / {a.max_parallel}
      </dd>
      <dt>Queued / backlog</dt>
      <dd data-field="queued">
        {a.queued} / {a.max_backlog}
      </dd>
      <FlowFacts agent={a} />
      <dt>Delivery</dt>
      <dd>
        {a.delivery}
        {a.push_url ? ` → ${a.push_url}` : ''}
      </dd>
      <dt>Timeout</dt>
      <dd>{a.timeout_seconds}s per run</dd>
      <dt>Lease</dt>
      <dd>
        {a.lease_ttl_seconds}s, {a.max_redeliveries} re-deliveries
      </dd>
      <dt>Created</dt>
      <dd>
        <Time iso={a.created_at} />
      </dd>
      {a.description && (
        <>
          <dt>Description</dt>
          <dd>{a.description}</dd>
        </>
      )}
    </dl>
  );
}

function RunTask({ agent, onStarted }: { agent: string; onStarted: () => void }) {
  const [message, setMessage] = useState('');
  const [out, setOut] = useState<{ ok: boolean; text: string; id?: string }>();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setOut(undefined);
    try {
      const r = await client().submit(agent, { message });
      setOut({ ok: true, text: 'Queued:', id: r.execution_id });
      setMessage('');
      onStarted();
    } catch (err) {
      setOut({ ok: false, text: `Not started: ${describe(err)}` });
    }
  };
  return (
    <form className="inline-form" onSubmit={submit} aria-label="run a task">
      <input
        name="task-message"
        placeholder="a task for this agent"
        value={message}
        onChange={(e) => setMessage(e.target.value)}
        required
      />
      <button type="submit">Run task</button>
      {out && (
        <p className={`outcome ${out.ok ? 'ok' : 'error'}`} role="status">
          {out.text} {out.id && <a href={link('executions', out.id)}>{out.id}</a>}
        </p>
      )}
    </form>
  );
}

function CreateSchedule({ agent, onCreated }: { agent: string; onCreated: () => void }) {
  const [open, setOpen] = useState(false);
  const [f, setF] = useState({
    name: '',
    cron: '0 9 * * 1-5',
    timezone: Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC',
    message: '',
  });
  const [error, setError] = useState<string>();
  if (!open)
    return (
      <button className="secondary" onClick={() => setOpen(true)}>
        New schedule
      </button>
    );
  const set = (k: keyof typeof f) => (e: { target: { value: string } }) => setF({ ...f, [k]: e.target.value });
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError(undefined);
    try {
      await createSchedule(agent, f);
      setOpen(false);
      onCreated();
    } catch (err) {
      setError(describe(err));
    }
  };
  return (
    <form className="stack-form" onSubmit={submit} aria-label="new schedule">
      <label>
        Name <input name="schedule-name" value={f.name} onChange={set('name')} required />
      </label>
      <label>
        Cron <input name="schedule-cron" value={f.cron} onChange={set('cron')} required />{' '}
        <span className="muted small">{cronInWords(f.cron)}</span>
      </label>
      <label>
        Time zone <input name="schedule-timezone" value={f.timezone} onChange={set('timezone')} required />
      </label>
      <label>
        Message <input name="schedule-message" value={f.message} onChange={set('message')} required />
      </label>
      <div>
        <button type="submit">Create schedule</button>{' '}
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

function EditSettings({ agent, onSaved }: { agent: Agent; onSaved: () => void }) {
  const [open, setOpen] = useState(false);
  const [f, setF] = useState({
    max_parallel: String(agent.max_parallel),
    max_backlog: String(agent.max_backlog),
    timeout_seconds: String(agent.timeout_seconds),
  });
  const [msg, setMsg] = useState<{ ok: boolean; text: string }>();
  if (!open)
    return (
      <button className="link" onClick={() => setOpen(true)}>
        Edit settings
      </button>
    );
  const set = (k: keyof typeof f) => (e: { target: { value: string } }) => setF({ ...f, [k]: e.target.value });
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    try {
      await client().updateAgent(agent.name, {
        max_parallel: Number(f.max_parallel),
        max_backlog: Number(f.max_backlog),
        timeout_seconds: Number(f.timeout_seconds),
      });
      setMsg({ ok: true, text: 'Saved. Lowering the cap never stops running work; it only holds back new admissions.' });
      onSaved();
    } catch (err) {
      setMsg({ ok: false, text: `Not saved: ${describe(err)}` });
    }
  };
  return (
    <form className="inline-form" onSubmit={submit} aria-label="agent settings">
      <label className="small">
        max parallel <input name="set-max-parallel" type="number" min={0} value={f.max_parallel} onChange={set('max_parallel')} />
      </label>
      <label className="small">
        max backlog <input name="set-max-backlog" type="number" min={0} value={f.max_backlog} onChange={set('max_backlog')} />
      </label>
      <label className="small">
        timeout (s) <input name="set-timeout" type="number" min={1} value={f.timeout_seconds} onChange={set('timeout_seconds')} />
      </label>
      <button type="submit">Save</button>
      <button type="button" className="link" onClick={() => setOpen(false)}>
        Close
      </button>
      {msg && (
        <p className={`outcome ${msg.ok ? 'ok' : 'error'}`} role="status">
          {msg.text}
        </p>
      )}
    </form>
  );
}
