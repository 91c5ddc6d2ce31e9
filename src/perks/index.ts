/** The Perks API client's public surface. */
export {
  type CallOptions,
  type EnrollInput,
  type ListRewardPagesOptions,
  PerksClient,
  type PerksClientHooks,
  type PerksClientOptions,
} from './client.js';
export { codeMatches, parseRetryAfter } from './error-mapping.js';
export {
  AuthError,
  ConflictError,
  ConsumerNotEnrolledError,
  InvalidInputError,
  isRetryable,
  NotFoundError,
  PerksError,
  type PerksErrorItem,
  ResponseShapeError,
  ResponseTooLargeError,
  ThrottledError,
  TransportError,
  UpstreamError,
  ValidationError,
} from './errors.js';
export type { RewardPage } from './paging.js';
export type { RetryEvent, RetryOptions } from './retry.js';
export {
  amountSchema,
  CONSENTS,
  CONSUMER_STATUSES,
  type Consent,
  type ConsumerStatus,
  canonicalDecimal,
  consentSchema,
  consumerIdSchema,
  isConsumerId,
  type Reward,
  type RewardStatus,
  type RewardType,
  rewardSchema,
} from './schemas.js';
export {
  type CachedToken,
  InMemoryTokenCache,
  type TokenCache,
  type TokenLock,
} from './token-cache.js';
