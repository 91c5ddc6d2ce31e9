/**
 * Mints and checks ES256 JWTs. Verified tokens are cached until expiry (an ECDSA verification
 * per request would cap a benchmark); revocation bumps a generation carried in each token.
 */
import { randomUUID, timingSafeEqual } from 'node:crypto';
import { type GenerateKeyPairResult, generateKeyPair, jwtVerify, SignJWT } from 'jose';

export const knownScopes = ['ALL', 'LOYALTIES', 'PERKS', 'TX_INJECTION'] as const;

/** What the sandbox signs, and so trusts once the signature is verified. */
interface Claims {
  program: string;
  environment: string;
  /** Space-separated. */
  scope: string;
  /** The generation: revocation bumps it. */
  gen: number;
  /** exp is whole seconds: short-TTL tests need the exact expiry. */
  exp_ms: number;
}

export type MintOverrides = { program?: string; environment?: string; ttlSeconds?: number };

const issuer = 'perks-sandbox';
const cacheLimit = 10_000;

export class TokenAuthority {
  private generation = 0;
  private readonly verified = new Map<string, Claims>();
  /** API clients, id to secret. Deleting one stops its mints; its tokens live until they expire. */
  readonly clients = new Map<string, string>();

  private constructor(
    private readonly keys: GenerateKeyPairResult,
    readonly program: string,
    private readonly ttlSeconds: number,
  ) {}

  /** A key pair per start: tokens never outlive their sandbox. */
  static async create(program: string, ttlSeconds: number): Promise<TokenAuthority> {
    return new TokenAuthority(await generateKeyPair('ES256'), program, ttlSeconds);
  }

  async mint(subject: string, scopes: readonly string[], overrides: MintOverrides = {}) {
    const ttl = overrides.ttlSeconds ?? this.ttlSeconds;
    const nowMs = Date.now();
    const claims: Claims = {
      program: overrides.program ?? this.program,
      environment: overrides.environment ?? 'sandbox',
      scope: scopes.join(' '),
      gen: this.generation,
      exp_ms: nowMs + ttl * 1000,
    };
    const token = await new SignJWT({ ...claims })
      .setProtectedHeader({ alg: 'ES256', typ: 'JWT' })
      .setIssuer(issuer)
      .setSubject(subject)
      .setIssuedAt(Math.floor(nowMs / 1000))
      .setExpirationTime(Math.ceil(claims.exp_ms / 1000))
      .setJti(randomUUID())
      .sign(this.keys.privateKey);
    const { scope } = claims;
    return { access_token: token, token_type: 'Bearer' as const, expires_in: ttl, scope };
  }

  async check(authorization: string | undefined): Promise<Claims | undefined> {
    const token = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')?.[1];
    if (!token) return undefined;
    let claims = this.verified.get(token);
    if (!claims) {
      try {
        // Expiry is checked below, to the millisecond.
        const options = { algorithms: ['ES256'], issuer, currentDate: new Date(0) };
        claims = (await jwtVerify(token, this.keys.publicKey, options))
          .payload as unknown as Claims;
      } catch {
        return undefined;
      }
      // Full (a token per request): start over rather than grow.
      if (this.verified.size >= cacheLimit) this.verified.clear();
      this.verified.set(token, claims);
    }
    const live = Date.now() < claims.exp_ms && claims.gen === this.generation;
    return live ? claims : undefined;
  }

  revokeAll(): void {
    this.generation++;
    this.verified.clear();
  }
}

/** The client whose id and secret `Basic base64(id:secret)` holds, each part form-urlencoded. */
export function basicClient(authorization: string | undefined, clients: Map<string, string>) {
  const match = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(authorization ?? '');
  const decoded = Buffer.from(match?.[1] ?? '', 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon <= 0) return undefined;
  const formDecode = (part: string) => decodeURIComponent(part.replaceAll('+', ' '));
  try {
    const id = formDecode(decoded.slice(0, colon));
    const presented = Buffer.from(formDecode(decoded.slice(colon + 1)));
    const expected = Buffer.from(clients.get(id) ?? '');
    const ok = expected.length > 0 && presented.length === expected.length;
    return ok && timingSafeEqual(presented, expected) ? id : undefined;
  } catch {
    return undefined; // not percent-encoding
  }
}
