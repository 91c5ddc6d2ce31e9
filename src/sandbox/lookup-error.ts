/**
 * Thrown by SandboxState when a test names a consumer or reward the sandbox does not hold, or
 * adds a consumer twice. The control API turns it into a 404 or 409.
 */
export class SandboxLookupError extends Error {
  override readonly name = 'SandboxLookupError';
  constructor(
    readonly reason: 'unknown-consumer' | 'unknown-reward' | 'consumer-exists',
    message: string,
  ) {
    super(message);
  }
}
