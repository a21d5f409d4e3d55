import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { RetentionEnv } from '../../config.ts';
import { iso } from '../../engine/views.ts';
import { readEngineHistoryStats, type HistoryStats as HistoryStatsRead } from '../../retention/stats.ts';
import { ErrorBody } from '../schemas.ts';
import { HistoryStats } from '../schemas/history.ts';
import type { ApiDeps } from '../deps.ts';

/** History size, age, retention settings and the last prune. Admin keys only. */
export const historyRoutes: FastifyPluginAsyncZod<ApiDeps & { retention: RetentionEnv }> = async (app, { engine, retention: settings }) => {
  app.get(
    '/v1/history',
    {
      schema: {
        tags: ['history'],
        summary: 'History size (estimated rows, bytes), oldest rows, retention settings and the last prune',
        response: { 200: HistoryStats, 403: ErrorBody },
      },
    },
    async () => {
      return historyView(await readEngineHistoryStats(engine, settings));
    },
  );
};

export function historyView(s: HistoryStatsRead): HistoryStats {
  return {
    ...s,
    oldest_completed_at: iso(s.oldest_completed_at),
    oldest_created_at: iso(s.oldest_created_at),
    oldest_audit_at: iso(s.oldest_audit_at),
    last_prune: { ...s.last_prune, started_at: iso(s.last_prune.started_at), completed_at: iso(s.last_prune.completed_at) },
  };
}
