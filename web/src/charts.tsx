/**
 * Time charts on uPlot (canvas, ~50 KB, no dependencies). One component owns one uPlot
 * instance: it is built when the series' shape changes, fed new data in place otherwise, sized
 * to its container, and destroyed on unmount.
 */
import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

export const COLORS = { ok: '#12805c', bad: '#c4320a', run: '#2f5bea', warn: '#b54708', muted: '#98a2b3' };

export interface Line {
  label: string;
  color: string;
  /** 'step': counts per bucket; 'line': a measure; 'dash': a fixed level such as the cap. */
  kind?: 'step' | 'line' | 'dash';
  fill?: boolean;
}

export interface TimeChartProps {
  /** Bucket starts, epoch milliseconds. */
  times: number[];
  /** Where the last bucket ends (epoch ms): it gets its width instead of ending at its start. */
  end?: number;
  lines: Line[];
  /** One array per line, values may be null (a gap). */
  values: Array<Array<number | null>>;
  height?: number;
  /** Sparkline: no axes, no legend, no cursor. */
  small?: boolean;
  /** Formats y values in the legend and on the axis. */
  unit?: (v: number) => string;
  label: string;
}

const stepped = uPlot.paths.stepped!({ align: 1 });

export function TimeChart({ times, end, lines, values, height = 160, small, unit, label }: TimeChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const shape = `${small}|${height}|${lines.map((l) => `${l.label}/${l.kind}`).join(',')}`;
  // A step holds its value until the next x: repeat the last bucket at its end so it is drawn.
  const xs = end === undefined ? times : [...times, end];
  const ys = end === undefined ? values : values.map((v) => [...v, v[v.length - 1] ?? null]);
  const data = [xs.map((t) => t / 1000), ...ys] as uPlot.AlignedData;

  useEffect(() => {
    const el = box.current!;
    const fmt = unit ?? ((v: number) => String(v));
    const opts: uPlot.Options = {
      width: Math.max(120, el.clientWidth),
      height,
      legend: { show: !small },
      cursor: small ? { show: false } : { drag: { x: false, y: false } },
      // A sparkline lifts its zero a little off the edge, or a quiet agent's line is clipped away.
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [small ? -Math.max(1, max) * 0.15 : 0, Math.max(1, max * 1.1)] } },
      axes: small
        ? [{ show: false }, { show: false }]
        : [
            { stroke: '#667085', grid: { stroke: '#eef2f6' } },
            { stroke: '#667085', grid: { stroke: '#eef2f6' }, size: 56, values: (_u, ticks) => ticks.map(fmt) },
          ],
      series: [
        {},
        ...lines.map<uPlot.Series>((l) => ({
          label: l.label,
          stroke: l.color,
          width: l.kind === 'dash' ? 1 : small ? 2 : 1.5,
          dash: l.kind === 'dash' ? [6, 4] : undefined,
          fill: l.fill ? `${l.color}22` : undefined,
          paths: l.kind === 'step' ? stepped : undefined,
          spanGaps: false,
          // A measure shows its points (a lone bucket is a dot, not nothing); counts are steps.
          points: { show: l.kind === undefined || l.kind === 'line', size: 5 },
          value: (_u, v) => (v === null || v === undefined ? '—' : fmt(v)),
        })),
      ],
    };
    plot.current = new uPlot(opts, data, el);
    const resize = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(120, el.clientWidth), height }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
    // Rebuilt only when the shape changes; data changes go through setData below.
  }, [shape]);

  useEffect(() => {
    plot.current?.setData(data);
  });

  return <div className={small ? 'chart small' : 'chart'} ref={box} role="img" aria-label={label} data-chart={label} />;
}
