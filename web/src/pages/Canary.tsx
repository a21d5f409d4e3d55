import type { CanaryStatus, CanaryViolation } from '../../../src/client.ts';
import { client } from '../api.ts';
import { useLoad, useTick } from '../hooks.ts';
import { Empty, Failed, Loading, Section, Time } from '../ui.tsx';

type Violation = CanaryViolation;

const WORDS: Record<CanaryStatus['status'], string> = {
  healthy: 'Healthy: every invariant held on the last check.',
  violated: 'Violated: at least one invariant does not hold.',
  stale: 'Stale: no canary cycle finished recently — it may not be running.',
  disabled: 'Disabled on this server.',
};

const loadStatus = () => client().canaryStatus();

export function CanarySummary() {
  const s = useLoad(loadStatus, []);
  if (s.error) return <Failed what="the canary" error={s.error} retry={s.reload} />;
  if (s.data === undefined) return <Loading what="the canary" />;
  return (
    <div>
      <p className={`canary canary-${s.data.status}`}>{WORDS[s.data.status] ?? s.data.status}</p>
      <p className="muted small">
        {s.data.open_count} open violation{s.data.open_count === 1 ? '' : 's'} · last check <Time iso={s.data.last_completed_at} /> ·{' '}
        <a href="#/canary">details</a>
      </p>
    </div>
  );
}

function Violations({ rows, empty }: { rows: Violation[]; empty: string }) {
  if (rows.length === 0) return <Empty>{empty}</Empty>;
  return (
    <div className="table-wrap">
      <table>
        <thead>
          <tr>
            <th>Invariant</th>
            <th>Subject</th>
            <th>Severity</th>
            <th>Diagnosis</th>
            <th>First seen</th>
            <th>Last seen</th>
            <th>Resolved</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((v) => (
            <tr key={v.id}>
              <td>{v.invariant}</td>
              <td className="mono">{v.subject}</td>
              <td>{v.severity}</td>
              <td>{v.diagnosis ?? v.reason}</td>
              <td>
                <Time iso={v.first_seen} />
              </td>
              <td>
                <Time iso={v.last_seen} />
              </td>
              <td>
                <Time iso={v.resolved_at} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

export function CanaryPage() {
  useTick();
  const s = useLoad(loadStatus, []);
  const past = useLoad(async () => (await client().canaryViolations({ state: 'resolved', limit: 100 })).violations, []);
  return (
    <div className="grid">
      <Section
        title="Canary"
        actions={
          <button
            className="secondary"
            onClick={() => {
              s.reload();
              past.reload();
            }}
          >
            Refresh
          </button>
        }
      >
        <CanarySummary key={String(s.loading)} />
      </Section>
      <Section wide title="Open violations">
        {s.error ? (
          <Failed what="violations" error={s.error} />
        ) : s.data === undefined ? (
          <Loading what="violations" />
        ) : (
          <Violations rows={s.data.open} empty="No open violations." />
        )}
      </Section>
      <Section wide title="Past violations">
        {past.error ? (
          <Failed what="past violations" error={past.error} />
        ) : past.data === undefined ? (
          <Loading what="past violations" />
        ) : (
          <Violations rows={past.data} empty="No resolved violations." />
        )}
      </Section>
    </div>
  );
}
