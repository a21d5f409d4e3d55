import { Agent, request } from 'node:http';

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

export interface RequestFrom {
  method?: string;
  headers?: Record<string, string>;
  body?: unknown;
  /** The client's own address (any 127.x.y.z on Linux): several clients on one machine. */
  localAddress?: string;
  /** Keep-alive agent to share sockets (default: one connection per request). */
  agent?: Agent;
}

/** One HTTP request from a chosen source address, read whole. */
export function requestFrom(url: string, opts: RequestFrom = {}): Promise<Answer> {
  const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: opts.method ?? (body === undefined ? 'GET' : 'POST'),
        headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...opts.headers },
        localAddress: opts.localAddress,
        agent: opts.agent ?? false,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** A counter's value in Prometheus text (0 when absent). */
export function counterValue(metrics: string, series: string): number {
  const line = metrics.split('\n').find((l) => l.startsWith(series + ' '));
  return line ? Number(line.slice(series.length + 1)) : 0;
}
