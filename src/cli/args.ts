import { InvalidArgumentError } from 'commander';

/** Option parsers shared by every command: a bad value is a usage error (exit 2) naming the flag. */
export const int = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n)) throw new InvalidArgumentError(`${name} must be an integer`);
  return n;
};

export const num = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n)) throw new InvalidArgumentError(`${name} must be a number`);
  return n;
};

export const json = (name: string) => (v: string) => {
  try {
    return JSON.parse(v);
  } catch {
    throw new InvalidArgumentError(`${name} must be valid JSON`);
  }
};
