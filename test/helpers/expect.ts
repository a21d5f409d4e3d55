import { expect } from 'vitest';
import { BatonError } from '../../src/domain/errors.ts';
import type { CliRun } from './process.ts';

/** Expects a CLI run to have exited with `code`, showing its output when it did not. */
export function exits(r: CliRun, code: number): CliRun {
  expect(r.code, `exit ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`).toBe(code);
  return r;
}

/** The BatonError `p` is refused with; any other error is rethrown, and no refusal fails the test. */
export async function refusal(p: Promise<unknown>): Promise<BatonError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof BatonError) return err;
    throw err;
  }
  throw new Error('expected a refusal');
}
