/**
 * What `perks-worker` does with an error it did not expect to handle: an OperationalError (the
 * environment failed: a server down, a port taken, a migration edited) is one line and exit 1;
 * an InputError (the input is wrong: an argument, a variable, a payload) is one line and exit
 * 2. Anything else is a bug and keeps its stack.
 */
export class OperationalError extends Error {}

/** `text` cut to `max` characters, with an ellipsis when cut. */
export const clip = (text: string, max: number): string =>
  text.length <= max ? text : `${text.slice(0, max - 1)}…`;

export class InputError extends Error {}

/** A command-line mistake, caught by the argument parser or by a command. */
export class UsageError extends InputError {
  override readonly name = 'UsageError';
}

/** The code of a driver error (ECONNREFUSED, a SQLSTATE, WRONGPASS...), if it has one. */
export function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** An error as one short phrase; an AggregateError (IPv4 and IPv6 refused) by its parts. */
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const parts =
    error instanceof AggregateError && !error.message ? error.errors.map(describeError) : [];
  const message = parts.length > 0 ? [...new Set(parts)].join('; ') : error.message;
  const code = errorCode(error);
  const text = code && !message.includes(code) ? `${message} (${code})` : message;
  return text || error.name;
}
