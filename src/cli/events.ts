import type { Command } from 'commander';
import { ApiError, Unreachable } from '../client.ts';
import { readSse } from '../sse.ts';
import { resolveConnection, type ConnectionFlags } from './connection.ts';

/** `baton events [--agent X]`: follow GET /v1/events, one line per execution status change. */
export function registerEventCommands(program: Command): void {
  program
    .command('events')
    .description('follow execution status changes live (Server-Sent Events) until interrupted')
    .option('--agent <name>', 'only this agent')
    .action(async (_o, cmd: Command) => {
      const o = cmd.optsWithGlobals() as ConnectionFlags & { json?: boolean; agent?: string };
      const { server, key } = resolveConnection(o);
      const base = server.replace(/\/+$/, '');
      const ctl = new AbortController();
      process.once('SIGINT', () => ctl.abort());
      process.once('SIGTERM', () => ctl.abort());
      let res: Response;
      try {
        res = await fetch(`${base}/v1/events${o.agent ? `?agent=${encodeURIComponent(o.agent)}` : ''}`, {
          headers: { accept: 'text/event-stream', ...(key ? { authorization: `Bearer ${key}` } : {}) },
          signal: ctl.signal,
        });
      } catch (err) {
        throw new Unreachable(base, (err as any)?.cause ?? err);
      }
      if (!res.ok || !res.body) {
        const b = (await res.json().catch(() => ({}))) as Record<string, unknown>;
        throw new ApiError(res.status, String(b.error ?? `http_${res.status}`), String(b.message ?? res.statusText), b);
      }
      process.stderr.write(`baton events: following ${base}${o.agent ? ` (agent ${o.agent})` : ''}; Ctrl-C to stop\n`);
      try {
        for await (const ev of readSse(res.body)) {
          if (ev.event !== 'execution') continue;
          const e = JSON.parse(ev.data) as { id: string; agent: string; status: string; at: string };
          process.stdout.write(o.json ? JSON.stringify(e) + '\n' : `${e.at.slice(11, 19)}  ${e.agent}  ${e.id}  ${e.status}\n`);
        }
      } catch (err) {
        if ((err as Error)?.name !== 'AbortError') throw err;
      }
    });
}
