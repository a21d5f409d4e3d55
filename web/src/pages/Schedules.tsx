import { useState } from 'react';
import { describe } from '../api.ts';
import { cronInWords } from '../cron.ts';
import { useLoad, useTick } from '../hooks.ts';
import { listSchedules, RunNow, setEnabled, type ScheduleListItem } from '../schedules.tsx';
import { Empty, Failed, Loading, Section, Time, link } from '../ui.tsx';

export function SchedulesPage() {
  useTick();
  const s = useLoad(() => listSchedules(), []);
  return (
    <Section title="Schedules">
      {s.error ? (
        <Failed what="schedules" error={s.error} retry={s.reload} />
      ) : s.data === undefined ? (
        <Loading what="schedules" />
      ) : s.data.length === 0 ? (
        <Empty>
          No schedules yet. Open an agent to create one, or use <code>baton schedules create</code>.
        </Empty>
      ) : (
        <div className="cards">
          {s.data.map((x) => (
            <ScheduleCard key={x.id} s={x} onChanged={s.reload} />
          ))}
        </div>
      )}
    </Section>
  );
}

function ScheduleCard({ s, onChanged }: { s: ScheduleListItem; onChanged: () => void }) {
  const [error, setError] = useState<string>();
  const toggle = async () => {
    setError(undefined);
    try {
      await setEnabled(s.id, !s.enabled);
      onChanged();
    } catch (err) {
      setError(describe(err));
    }
  };
  return (
    <article className="schedule" data-schedule={s.id}>
      <h3>
        {s.name}{' '}
        <span className="muted small">
          on <a href={link('agents', s.agent)}>{s.agent}</a>
        </span>
      </h3>
      <p>
        <strong>{cronInWords(s.cron)}</strong>{' '}
        <span className="muted">
          ({s.timezone}) · <code>{s.cron}</code> · overlap: {s.overlap_policy}
        </span>
      </p>
      <p className="small">
        {s.enabled ? 'Next run: ' : 'Disabled: no runs are due. '}
        {s.enabled && (s.next_run_at ? <Time iso={s.next_run_at} /> : 'none')} · last run <Time iso={s.last_run_at} />
      </p>
      <div className="row">
        <button className="secondary" onClick={toggle}>
          {s.enabled ? 'Disable' : 'Enable'}
        </button>
        <RunNow schedule={s} />
      </div>
      {error && (
        <p className="state error" role="alert">
          {error}
        </p>
      )}
    </article>
  );
}
