/**
 * Last line of defence for messages built from server text: a gateway may echo a request
 * header back in an HTML error page, so secrets and bearer tokens are masked wherever they
 * appear, by value when known and by shape otherwise.
 */

const shapes: RegExp[] = [
  /\bsk_[A-Za-z0-9]+_\S+/g, // client secrets
  /\beyJ[\w-]*\.[\w-]*\.[\w-]*/g, // JWTs (access tokens are ES256 JWTs)
  /\b(Bearer|Basic)\s+[\w.~+/=-]+/gi, // authorization header values
];

export function redactSecrets(text: string, secrets: readonly string[] = []): string {
  let out = text;
  for (const secret of secrets) {
    // Short values would mask innocent text; real secrets and tokens are long.
    if (secret.length >= 8) out = out.split(secret).join('[redacted]');
  }
  for (const shape of shapes) out = out.replace(shape, '[redacted]');
  return out;
}

/** Every string of `value` through redactSecrets; past 32 levels, dropped (no stack blow-up). */
export function redactDeep<T>(value: T, secrets: readonly string[], depth = 0): T {
  if (typeof value === 'string') return redactSecrets(value, secrets) as T;
  if (typeof value !== 'object' || value === null) return value;
  if (depth > 32) return null as T;
  if (Array.isArray(value)) return value.map((v) => redactDeep(v, secrets, depth + 1)) as T;
  const entries = Object.entries(value).map(([k, v]) => [k, redactDeep(v, secrets, depth + 1)]);
  return Object.fromEntries(entries) as T;
}
