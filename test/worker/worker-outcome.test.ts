import { describe, expect, it } from 'vitest';
import { decideReport, outcome, refusedOutcome, type Report, type TaskEnd } from '../../src/worker/outcome.ts';

// What a finished task reports, over plain facts: no server. The requests around it (heartbeats,
// logs, complete, release) are covered by logs.test.ts, outage.test.ts and worker.command.test.ts.

const DEADLINE = '2026-01-05T09:10:00.000Z';
const end = (over: Partial<TaskEnd>): TaskEnd => ({
  settled: undefined,
  reason: undefined,
  leaseLost: false,
  deadlineAt: DEADLINE,
  ...over,
});
const returned = (value: unknown): TaskEnd['settled'] => ({ ok: true, value });
const threw = (error: unknown): TaskEnd['settled'] => ({ ok: false, error });
const coded = (message: string, code: unknown) => Object.assign(new Error(message), { code });
const complete = (o: object): Report => ({ kind: 'complete', outcome: o as any });

const SECRET = 'sk-abcdefghijklmnopqrstuvwxyz012345';

const cases: Array<[string, TaskEnd, Report]> = [
  [
    'returned a value: succeeded with it as the result',
    end({ settled: returned({ n: 1 }) }),
    complete({ status: 'succeeded', result: { n: 1 } }),
  ],
  [
    'returned undefined: succeeded without a result',
    end({ settled: returned(undefined) }),
    complete({ status: 'succeeded', result: undefined }),
  ],
  [
    'returned outcome({...}): that status, result, error and usage',
    end({
      settled: returned(outcome({ status: 'failed', result: 'r', error: { code: 'E_MINE', message: 'mine' }, usage: { total_tokens: 3 } })),
    }),
    complete({ status: 'failed', result: 'r', error: { code: 'E_MINE', message: 'mine' }, usage: { total_tokens: 3 } }),
  ],
  [
    'returned outcome cancelled: cancelled as given',
    end({ settled: returned(outcome({ status: 'cancelled' })) }),
    complete({ status: 'cancelled' }),
  ],
  [
    'returned a plain object shaped like an outcome: it is the result',
    end({ settled: returned({ status: 'failed' }) }),
    complete({ status: 'succeeded', result: { status: 'failed' } }),
  ],
  [
    'outcome failed without an error: code failed',
    end({ settled: returned(outcome({ status: 'failed' })) }),
    complete({ status: 'failed', error: { code: 'failed', message: 'the handler reported failure without a message' } }),
  ],
  [
    'outcome with an empty error message: a message is supplied',
    end({ settled: returned(outcome({ status: 'failed', error: { message: '' } })) }),
    complete({ status: 'failed', error: { code: undefined, message: 'failed without a message' } }),
  ],
  [
    'threw an Error with a string code: failed with that code',
    end({ settled: threw(coded('disk full', 'ENOSPC')) }),
    complete({ status: 'failed', error: { code: 'ENOSPC', message: 'disk full' } }),
  ],
  [
    'threw an Error without a code: handler_error',
    end({ settled: threw(new Error('boom')) }),
    complete({ status: 'failed', error: { code: 'handler_error', message: 'boom' } }),
  ],
  [
    'threw an Error with a numeric code: handler_error',
    end({ settled: threw(coded('boom', 42)) }),
    complete({ status: 'failed', error: { code: 'handler_error', message: 'boom' } }),
  ],
  [
    'threw a string: it is the message',
    end({ settled: threw('plain') }),
    complete({ status: 'failed', error: { code: 'handler_error', message: 'plain' } }),
  ],
  [
    'threw an empty string: a message is supplied',
    end({ settled: threw('') }),
    complete({ status: 'failed', error: { code: 'handler_error', message: 'the handler failed without a message' } }),
  ],
  [
    'no signal and no return: failed, the handler did not return',
    end({}),
    complete({ status: 'failed', error: { code: 'handler_error', message: 'the handler did not return' } }),
  ],
  [
    'cancel requested, handler returned: cancelled, its result kept',
    end({ reason: 'cancelled', settled: returned('partial') }),
    complete({
      status: 'cancelled',
      result: 'partial',
      error: { code: 'cancel_requested', message: 'cancelled on request' },
      usage: undefined,
    }),
  ],
  [
    "cancel requested, handler threw: cancelled, with the handler's message",
    end({ reason: 'cancelled', settled: threw(new Error('aborted by signal')) }),
    complete({
      status: 'cancelled',
      result: undefined,
      error: { code: 'cancel_requested', message: 'cancelled on request; aborted by signal' },
      usage: undefined,
    }),
  ],
  [
    'cancel requested, handler never returned: cancelled on request',
    end({ reason: 'cancelled' }),
    complete({
      status: 'cancelled',
      result: undefined,
      error: { code: 'cancel_requested', message: 'cancelled on request' },
      usage: undefined,
    }),
  ],
  [
    'deadline passed, handler never returned: failed timeout, quoting the deadline',
    end({ reason: 'deadline' }),
    complete({
      status: 'failed',
      result: undefined,
      error: { code: 'timeout', message: `timed out: the deadline ${DEADLINE} passed (agent timeout)` },
      usage: undefined,
    }),
  ],
  [
    'deadline passed, handler returned an outcome: still timeout, its result and usage kept',
    end({ reason: 'deadline', settled: returned(outcome({ status: 'succeeded', result: 'late', usage: { cost_usd: 1 } })) }),
    complete({
      status: 'failed',
      result: 'late',
      error: { code: 'timeout', message: `timed out: the deadline ${DEADLINE} passed (agent timeout)` },
      usage: { cost_usd: 1 },
    }),
  ],
  [
    'lease lost (heartbeat or logs): report nothing, whatever the handler said',
    end({ leaseLost: true, settled: returned('done') }),
    { kind: 'lost' },
  ],
  ['signal fired for lease_lost: report nothing', end({ reason: 'lease_lost' }), { kind: 'lost' }],
  ['shutdown: release the task', end({ reason: 'shutdown', settled: returned('done') }), { kind: 'release' }],
  ['shutdown after the lease was lost: report nothing', end({ reason: 'shutdown', leaseLost: true }), { kind: 'lost' }],
  [
    'an error code is cut to 100 characters',
    end({ settled: threw(coded('x', 'C'.repeat(150))) }),
    complete({ status: 'failed', error: { code: 'C'.repeat(100), message: 'x' } }),
  ],
  [
    'a NUL in an error message is replaced',
    end({ settled: threw(new Error('a\u0000b')) }),
    complete({ status: 'failed', error: { code: 'handler_error', message: 'a\uFFFDb' } }),
  ],
  [
    'a secret in an error message is redacted',
    end({ settled: threw(new Error(`token ${SECRET} refused`)) }),
    complete({ status: 'failed', error: { code: 'handler_error', message: 'token sk-[redacted] refused' } }),
  ],
  [
    'an error message over 9,000 characters is cut with a marker',
    end({ settled: threw(new Error('m'.repeat(12_000))) }),
    complete({ status: 'failed', error: { code: 'handler_error', message: 'm'.repeat(9_000) + '… [cut]' } }),
  ],
];

describe('decideReport: what a finished task reports', () => {
  it.each(cases)('%s', (_name, facts, want) => {
    expect(decideReport(facts)).toEqual(want);
  });

  it("leaves the handler's own outcome object as it was", () => {
    const given = outcome({ status: 'failed', error: { code: 'E', message: `leaked ${SECRET}` } });
    decideReport(end({ settled: returned(given) }));
    expect(given.error).toEqual({ code: 'E', message: `leaked ${SECRET}` });
  });
});

describe('refusedOutcome: when the server refuses the outcome itself', () => {
  const refused = {
    status: 'failed',
    error: { code: 'invalid_outcome', message: "the server refused the handler's outcome: result too large" },
  };
  it.each([
    ['400 (a malformed outcome): reported as invalid_outcome', 400, refused],
    ['413 (a result too large): reported as invalid_outcome', 413, refused],
    ['409 (lease lost): not a verdict on the outcome', 409, undefined],
    ['404 (gone): not a verdict on the outcome', 404, undefined],
    ['503 (server down): not a verdict on the outcome', 503, undefined],
  ])('%s', (_name, status, want) => {
    expect(refusedOutcome(status, 'result too large')).toEqual(want);
  });
});
