import { createHmac } from 'node:crypto';
import { InputError } from '../errors.js';
import { isConsumerId } from '../perks/schemas.js';

/** Thrown when a user id needs the HMAC key and none is configured. */
export class ConsumerIdKeyMissingError extends InputError {
  override readonly name = 'ConsumerIdKeyMissingError';
  /** The problem without the field's name, for lists that name it apart. */
  static readonly problem =
    'this user id is not a valid consumer id (2-100 of [a-zA-Z0-9_-]), so it must be derived, and PERKS_CONSUMER_ID_KEY is not set';
  constructor(readonly field: string) {
    super(`${field}: ${ConsumerIdKeyMissingError.problem}`);
  }
}

/** The shortest PERKS_CONSUMER_ID_KEY that is not warned about. */
const recommendedKeyLength = 16;

/** A warning for `work` to log at start when the key is short; never includes the key. */
export function consumerIdKeyWarning(key: string | undefined): string | undefined {
  if (key === undefined || key.length >= recommendedKeyLength) return undefined;
  return `PERKS_CONSUMER_ID_KEY is ${key.length} characters long; use at least ${recommendedKeyLength} random characters (and never change it once used)`;
}

const base32Alphabet = 'abcdefghijklmnopqrstuvwxyz234567';

/** RFC 4648 base32, lower case, no padding: consumer-id safe and case-insensitive. */
function base32(bytes: Uint8Array): string {
  const bits = [...bytes].map((byte) => byte.toString(2).padStart(8, '0')).join('');
  const groups = bits.match(/.{1,5}/g) ?? [];
  return groups.map((group) => base32Alphabet[Number.parseInt(group.padEnd(5, '0'), 2)]).join('');
}

/**
 * A customer's consumer id, the same on every call, replica and retry, so that a retried
 * enrollment answers 409 instead of creating a second consumer. A user id that is a valid
 * consumer id is used as it is; any other becomes `u_` + base32(HMAC-SHA256(key, userId))
 * (54 characters). The key must never change: under another, a customer is another consumer.
 */
export function deriveConsumerId(
  userId: string,
  key: string | undefined,
  field = 'userId',
): string {
  if (isConsumerId(userId)) return userId;
  if (!key) throw new ConsumerIdKeyMissingError(field);
  return `u_${base32(createHmac('sha256', key).update(userId, 'utf8').digest())}`;
}
