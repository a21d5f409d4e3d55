/**
 * An agent's activity over time: the series charts and the seat timeline on the agent page, the
 * small per-agent chart on the overview, and the canary's history. Data comes from bounded
 * reads (GET /v1/agents/{agent}/series and /seats, GET /v1/canary/violations) and reloads when
 * the agent's executions change (the event stream), never on a timer.
 */
import { useState } from 'react';
import type { CanaryViolation } from '../../src/client.ts';
import { ACTIVITY_WINDOW_NAMES } from '../../src/domain/activity.ts';
import { agentSeats, agentSeries, client, type ActivityWindow, type AgentSeats, type AgentSeries } from './api.ts';
import { COLORS, TimeChart } from './charts.tsx';
import { useLive, useLoad } from './hooks.ts';
import { duration, Empty, Failed, Loading, link } from './ui.tsx';

const times = (s: AgentSeries) => s.buckets.map((b) => Date.parse(b.start));
const total = (s: AgentSeries, k: 'succeeded' | 'failed' | 'other') => s.buckets.reduce((n, b) => n + b[k], 0);
const most = (s: AgentSeries, k: 'queued_max' | 'running_max') => s.buckets.reduce((n, b) => Math.max(n, b[k]), 0);
const secs = (ms: number) => duration(ms);
const WINDOW_WORDS: Record<ActivityWindow, string> = { '1h': 'the last hour', '6h': 'the last 6 hours', '24h': 'the last 24 hours' };

function WindowPicker({
  value,
  onChange,
  options = ACTIVITY_WINDOW_NAMES,
}: {
  value: ActivityWindow;
  onChange: (w: ActivityWindow) => void;
  options?: readonly ActivityWindow[];
}) {
  return (
    <div className="window-picker" role="group" aria-label="time window">
      {options.map((w) => (
        <button key={w} className={w === value ? '' : 'secondary'} aria-pressed={w === value} onClick={() => onChange(w)}>
          {w}
        </button>
      ))}
    </div>
  );
}

/** Completions and failures, duration p50/p95, queue depth and seats in use over a window. */
export function AgentCharts({ agent }: { agent: string }) {
  const [window, setWindow] = useState<ActivityWindow>('1h');
  const series = useLoad(() => agentSeries(agent, window), [agent, window]);
  useLive((e) => e.agent === agent, series.reload, [agent, series.reload]);
  const s = series.data;
  return (
    <section className="card wide" aria-label="activity">
      <header className="card-head">
        <h2>Activity</h2>
        <WindowPicker value={window} onChange={setWindow} />
      </header>
      {series.error ? (
        <Failed what="the activity" error={series.error} retry={series.reload} />
      ) : !s ? (
        <Loading what="the activity" />
      ) : (
        <>
          <p className="summary" data-field="activity-summary">
            In {WINDOW_WORDS[s.window]}: <strong data-field="succeeded">{total(s, 'succeeded')}</strong> succeeded,{' '}
            <strong data-field="failed">{total(s, 'failed')}</strong> failed, {total(s, 'other')} cancelled or skipped · most waiting{' '}
            <strong data-field="queued-max">{most(s, 'queued_max')}</strong> · most seats in use{' '}
            <strong data-field="running-max">{most(s, 'running_max')}</strong> of {s.max_parallel}
            {s.complete_from && (
              <span className="warn">
                {' '}
                · counts are exact; durations, queue and seats are drawn from {new Date(s.complete_from).toLocaleTimeString()} on (the
                newest runs only: this agent is busy)
              </span>
            )}
          </p>
          <div className="charts">
            <figure>
              <figcaption>Finished per {duration(s.bucket_ms)}</figcaption>
              <TimeChart
                label="finished"
                times={times(s)}
                end={Date.parse(s.to)}
                lines={[
                  { label: 'succeeded', color: COLORS.ok, kind: 'step', fill: true },
                  { label: 'failed', color: COLORS.bad, kind: 'step', fill: true },
                ]}
                values={[s.buckets.map((b) => b.succeeded), s.buckets.map((b) => b.failed)]}
              />
            </figure>
            <figure>
              <figcaption>Duration</figcaption>
              <TimeChart
                label="duration"
                unit={secs}
                times={times(s)}
                end={Date.parse(s.to)}
                lines={[
                  { label: 'p50', color: COLORS.run },
                  { label: 'p95', color: COLORS.warn },
                ]}
                values={[s.buckets.map((b) => b.p50_ms), s.buckets.map((b) => b.p95_ms)]}
              />
            </figure>
            <figure>
              <figcaption>Queue and seats (most at once)</figcaption>
              <TimeChart
                label="queue"
                times={times(s)}
                end={Date.parse(s.to)}
                lines={[
                  { label: 'waiting', color: COLORS.warn, kind: 'step', fill: true },
                  { label: 'running', color: COLORS.run, kind: 'step' },
                  { label: 'cap', color: COLORS.muted, kind: 'dash' },
                ]}
                values={[s.buckets.map((b) => b.queued_max), s.buckets.map((b) => b.running_max), s.buckets.map(() => s.max_parallel)]}
              />
            </figure>
          </div>
        </>
      )}
    </section>
  );
}

const clock = (iso: string) => new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });

/** Which execution held which seat when: one lane per seat, the cap marked, and what waits now. */
export function SeatTimeline({ agent }: { agent: string }) {
  const [window, setWindow] = useState<ActivityWindow>('1h');
  const seats = useLoad(() => agentSeats(agent, window), [agent, window]);
  useLive((e) => e.agent === agent, seats.reload, [agent, seats.reload]);
  return (
    <section className="card wide" aria-label="seat timeline">
      <header className="card-head">
        <h2>Seat timeline</h2>
        <WindowPicker value={window} onChange={setWindow} options={['1h', '6h']} />
      </header>
      {seats.error ? (
        <Failed what="the seat timeline" error={seats.error} retry={seats.reload} />
      ) : !seats.data ? (
        <Loading what="the seat timeline" />
      ) : (
        <Lanes s={seats.data} />
      )}
    </section>
  );
}

function Lanes({ s }: { s: AgentSeats }) {
  const to = Date.parse(s.to);
  // Zoomed to the runs: the window's start, or shortly before the earliest run or wait in it,
  // so a burst of short runs is legible (never narrower than 15 seconds).
  const starts = [...s.intervals.map((r) => r.queued_at ?? r.started_at), ...s.waiting.map((w) => w.queued_at)]
    .filter((t): t is string => t !== null)
    .map(Date.parse);
  const earliest = starts.length > 0 ? Math.min(...starts) : Date.parse(s.from);
  const from = Math.max(Date.parse(s.from), Math.min(to - 15_000, earliest - (to - earliest) * 0.05));
  const zoomed = from > Date.parse(s.from);
  const at = (iso: string | null) => (Math.min(to, Math.max(from, iso === null ? to : Date.parse(iso))) - from) / (to - from);
  const pct = (x: number) => `${(x * 100).toFixed(3)}%`;
  const lanes = Math.max(s.max_parallel, s.seats_used);
  if (lanes === 0 && s.waiting.length === 0) return <Empty>No seats held and nothing waiting in this window.</Empty>;
  return (
    <div className="seats" data-seats-used={s.seats_used} data-cap={s.max_parallel}>
      <p className="summary">
        {s.seats_used <= s.max_parallel ? (
          <span className="ok">
            At most {s.seats_used} of {s.max_parallel} seat{s.max_parallel === 1 ? '' : 's'} in use at once: the cap held.
          </span>
        ) : (
          <span className="warn">
            {s.seats_used} runs at once against a cap of {s.max_parallel} now (the cap was higher, or it was lowered while they ran).
          </span>
        )}{' '}
        {s.waiting.length} waiting now.{s.truncated ? ' (Only the newest runs are shown.)' : ''}
      </p>
      {Array.from({ length: lanes }, (_, seat) => (
        <div key={seat} className={seat >= s.max_parallel ? 'seat-lane over-cap' : 'seat-lane'} data-seat={seat}>
          <span className="seat-label">seat {seat + 1}</span>
          <div className="seat-track">
            {s.intervals
              .filter((r) => r.seat === seat)
              .map((r) => {
                const left = at(r.started_at);
                const waited = r.queued_at ? Date.parse(r.started_at) - Date.parse(r.queued_at) : null;
                const title = `${r.execution_id} · ${r.status} · attempt ${r.attempt}${r.owner ? ` on ${r.owner}` : ''} · ${clock(r.started_at)} → ${r.ended_at ? clock(r.ended_at) : 'now'}${waited !== null ? ` · waited ${duration(waited)}` : ''}`;
                return (
                  <a
                    key={r.execution_id}
                    className={`seat-bar bar-${r.status}`}
                    data-execution={r.execution_id}
                    href={link('executions', r.execution_id)}
                    title={title}
                    aria-label={title}
                    style={{ left: pct(left), width: pct(Math.max(0, at(r.ended_at) - left)) }}
                  />
                );
              })}
          </div>
        </div>
      ))}
      {s.waiting.length > 0 && (
        <div className="seat-lane waiting" data-seat="waiting">
          <span className="seat-label">waiting</span>
          <div className="seat-track">
            {s.waiting.map((w, i) => {
              const left = at(w.queued_at);
              const title = `${w.execution_id} · waiting since ${w.queued_at ? clock(w.queued_at) : '?'}${w.run_after ? ` · not before ${clock(w.run_after)}` : ''}`;
              return (
                <a
                  key={w.execution_id}
                  className="seat-bar bar-queued"
                  data-execution={w.execution_id}
                  href={link('executions', w.execution_id)}
                  title={title}
                  aria-label={title}
                  style={{ left: pct(left), width: pct(1 - left), top: `${(i % 4) * 25}%`, height: '25%' }}
                />
              );
            })}
          </div>
        </div>
      )}
      <div className="seat-axis">
        <span>
          {clock(new Date(from).toISOString())}
          {zoomed ? ' (zoomed to the runs)' : ''}
        </span>
        <span>{clock(new Date((from + to) / 2).toISOString())}</span>
        <span>now</span>
      </div>
    </div>
  );
}

/** The overview's small chart for one agent: runs finished over the last hour. */
export function AgentSparkline({ agent }: { agent: string }) {
  const series = useLoad(() => agentSeries(agent, '1h'), [agent]);
  useLive((e) => e.agent === agent, series.reload, [agent, series.reload]);
  const s = series.data;
  if (series.error) return <span className="muted small">—</span>;
  if (!s) return <span className="muted small">…</span>;
  return (
    <div className="spark" data-spark={agent} title={`last hour: ${total(s, 'succeeded')} succeeded, ${total(s, 'failed')} failed`}>
      <TimeChart
        small
        height={32}
        label={`${agent} last hour`}
        times={times(s)}
        end={Date.parse(s.to)}
        lines={[
          { label: 'succeeded', color: COLORS.ok, kind: 'step', fill: true },
          { label: 'failed', color: COLORS.bad, kind: 'step', fill: true },
        ]}
        values={[s.buckets.map((b) => b.succeeded), s.buckets.map((b) => b.failed)]}
      />
      <span className="small">
        <span className="ok">{total(s, 'succeeded')}</span> / <span className="err">{total(s, 'failed')}</span>
      </span>
    </div>
  );
}

const DAY = 86_400_000;
const CANARY_BUCKETS = 48;

/**
 * The canary's last 24 hours: violations open at each half hour, from the newest 200
 * violations (one page of GET /v1/canary/violations, newest first by last_seen).
 */
export function CanaryHistory() {
  const v = useLoad(async () => (await client().canaryViolations({ state: 'all', limit: 200 })).violations, []);
  if (v.error) return <Failed what="the canary's history" error={v.error} retry={v.reload} />;
  if (!v.data) return <Loading what="the canary's history" />;
  const now = Date.now();
  const from = now - DAY;
  const step = DAY / CANARY_BUCKETS;
  const starts = Array.from({ length: CANARY_BUCKETS }, (_, i) => from + i * step);
  const openAt = (t0: number, t1: number, rows: CanaryViolation[]) =>
    rows.filter((r) => Date.parse(r.first_seen) < t1 && (r.resolved_at === null || Date.parse(r.resolved_at) >= t0)).length;
  const critical = v.data.filter((r) => r.severity === 'critical');
  const recent = v.data.filter((r) => r.resolved_at === null || Date.parse(r.resolved_at) >= from);
  return (
    <div className="canary-history">
      <p className="muted small" data-field="canary-history">
        {recent.length} violation{recent.length === 1 ? '' : 's'} open at some point in the last 24 hours ·{' '}
        {v.data.filter((r) => r.resolved_at === null).length} open now
      </p>
      <TimeChart
        label="canary violations"
        height={110}
        times={starts}
        end={now}
        lines={[
          { label: 'open violations', color: COLORS.bad, kind: 'step', fill: true },
          { label: 'critical', color: COLORS.warn, kind: 'step' },
        ]}
        values={[starts.map((t) => openAt(t, t + step, v.data!)), starts.map((t) => openAt(t, t + step, critical))]}
      />
    </div>
  );
}
