/** Execution logs: the worker's fenced append, and the reader's page or live stream. */
import { z } from 'zod';
import { INT32_MAX } from '../../domain/limits.ts';
import { queryInt } from './query.ts';

export const LogStream = z.enum(['stdout', 'stderr', 'system']);

export const LogAppendBody = z.strictObject({
  lease_token: z.string().min(1).max(200),
  lines: z
    .array(
      z.strictObject({
        stream: z.enum(['stdout', 'stderr']).optional().describe('default stdout'),
        line: z
          .string()
          .max(64 * 1024)
          .describe('one line of output (longer lines are cut when stored)'),
      }),
    )
    .max(1000)
    .describe('lines in the order they were written'),
});
export type LogAppendBody = z.infer<typeof LogAppendBody>;

export const LogAppendResponse = z.object({
  accepted: z.number().int().describe('lines stored (a truncation marker counts)'),
  dropped: z.number().int().describe('lines dropped because the log reached its bounds'),
  truncated: z.boolean(),
});

export const LogLine = z.object({
  seq: z.number().int().describe('1, 2, 3… per execution'),
  at: z.string().describe('ISO-8601 UTC timestamp'),
  stream: LogStream,
  line: z.string(),
});
export type LogLine = z.infer<typeof LogLine>;

const bool = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1');
export const LogQuery = z.strictObject({
  follow: bool.optional().describe('stream as Server-Sent Events until the execution ends'),
  // seq is a 32-bit INTEGER column: a larger bound would be a database error, not an empty page.
  after: queryInt(0, INT32_MAX).optional().describe('only lines with seq greater than this (default 0)'),
  limit: queryInt(1, 5000).optional().describe('page size without follow (default 1000)'),
});

export const LogPage = z.object({
  execution_id: z.string(),
  status: z.string().describe('the execution status when the page was read'),
  lines: z.array(LogLine),
  next_after: z.number().int().describe('pass as `after` to continue'),
  truncated: z.boolean().describe('the log reached its bounds; later lines were dropped'),
});
export type LogPage = z.infer<typeof LogPage>;
