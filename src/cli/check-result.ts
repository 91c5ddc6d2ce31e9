/** What one line of `perks-worker check` says, and the helpers every check builds it with. */
import { redactUrl } from '../config.js';
import { clip } from '../errors.js';
import { redactSecrets } from '../perks/redact.js';

export interface CheckResult {
  /** Stable: configuration, redis, postgres, postgres direct, schema, perks api, rabbitmq, webhook. */
  name: string;
  /** What was checked, as it may be shown: a URL without its password, a schema name. */
  target?: string;
  /** False only for a failure: the line that makes `check` exit 1. */
  ok: boolean;
  /** Not configured, or not checkable after an earlier failure: neither ✓ nor ✗, `ok` true. */
  skipped?: boolean;
  detail: string;
  /** Set on a failure: what to change. */
  fix?: string;
}

/** Every check answers within this: an unreachable host must not hold `check`. */
export const checkTimeoutMs = 5000;

const result = (name: string, target: string | undefined, rest: Omit<CheckResult, 'name'>) => ({
  name,
  ...(target ? { target } : {}),
  ...rest,
});
export const pass = (name: string, target: string | undefined, detail: string): CheckResult =>
  result(name, target, { ok: true, detail });
export const fail = (name: string, target: string | undefined, detail: string, fix: string) =>
  result(name, target, { ok: false, detail, fix });
export const skip = (name: string, target: string | undefined, detail: string): CheckResult =>
  result(name, target, { ok: true, skipped: true, detail });

const maxText = 240;

/** One line each, every known secret and URL password masked, whatever a server echoed. */
export function scrub(result: CheckResult, secrets: readonly string[]): CheckResult {
  const clean = (text: string) => {
    const line = redactSecrets(redactUrl(text), secrets).replace(/\s+/g, ' ').trim();
    return clip(line, maxText);
  };
  return {
    ...result,
    ...(result.target ? { target: clean(result.target) } : {}),
    detail: clean(result.detail),
    ...(result.fix ? { fix: clean(result.fix) } : {}),
  };
}

/** `✓ redis redis://127.0.0.1:6379: reachable (7.2.4)`; a failure ends with its fix. */
export function formatLine(result: CheckResult): string {
  const mark = result.skipped ? '-' : result.ok ? '✓' : '✗';
  const label = result.target ? `${result.name} ${result.target}` : result.name;
  const fix = !result.ok && result.fix ? ` — fix: ${result.fix}` : '';
  return `${mark} ${label}: ${result.detail}${fix}`;
}
