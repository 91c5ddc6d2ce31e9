import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PerksClient } from '../../../src/perks/client.js';
import { basicCredentials } from '../../../src/perks/http.js';
import { type Sandbox, startSandbox } from '../../../src/sandbox/index.js';
import { apiHeaders, basicAuth, call, envelopeOf, fetchToken } from './http.js';

let sandbox: Sandbox;
const rewardsPath = '/perks/consumers/sbx_0001/rewards';

beforeAll(async () => {
  sandbox = await startSandbox({ consumers: 1, rewardsPerConsumer: 3 });
});
afterAll(async () => {
  await sandbox.close();
});

function tokenRequest(headers: Record<string, string>, body?: string) {
  return call(`${sandbox.baseUrl}/tokens`, {
    method: 'POST',
    headers: { 'x-api-version': '2.0.0', ...headers },
    body,
  });
}

describe('POST /tokens', () => {
  it('issues an ES256 JWT for a JSON, form or empty body', async () => {
    const auth = basicAuth(sandbox.clientId, sandbox.clientSecret);
    const before = sandbox.state.counters().tokensMinted;
    const answers = [
      await tokenRequest(
        { authorization: auth, 'content-type': 'application/json' },
        '{"grant_type":"client_credentials"}',
      ),
      await tokenRequest(
        { authorization: auth, 'content-type': 'application/x-www-form-urlencoded' },
        'grant_type=client_credentials',
      ),
      await tokenRequest({ authorization: auth }),
    ];
    for (const answer of answers) {
      expect(answer.status).toBe(200);
      const body = answer.json() as Record<string, unknown>;
      expect(body).toMatchObject({ token_type: 'Bearer', expires_in: 3600, scope: 'PERKS' });
      const token = String(body.access_token);
      const header = JSON.parse(Buffer.from(token.split('.')[0] ?? '', 'base64url').toString());
      const claims = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString());
      expect(header.alg).toBe('ES256');
      expect(claims).toMatchObject({ environment: 'sandbox', program: 'sandbox-program' });
    }
    expect(sandbox.state.counters().tokensMinted).toBe(before + 3);
  });

  it('answers 401 ERR-401-00 to bad or missing credentials, and mints nothing', async () => {
    const before = sandbox.state.counters().tokensMinted;
    const cases: Record<string, string>[] = [
      {},
      { authorization: basicAuth(sandbox.clientId, 'sk_sandbox_wrong') },
      { authorization: basicAuth('someone-else', sandbox.clientSecret) },
      { authorization: 'Basic !!!' },
      { authorization: 'Bearer abc' },
    ];
    for (const headers of cases) {
      const answer = await tokenRequest(headers);
      expect(answer.status).toBe(401);
      expect(envelopeOf(answer).code).toBe('ERR-401-00');
      expect(answer.text).not.toContain('sk_sandbox');
    }
    expect(sandbox.state.counters().tokensMinted).toBe(before);
  });

  it('rejects another grant type and malformed JSON with 400', async () => {
    const auth = basicAuth(sandbox.clientId, sandbox.clientSecret);
    const grant = await tokenRequest(
      { authorization: auth, 'content-type': 'application/json' },
      '{"grant_type":"password"}',
    );
    expect(envelopeOf(grant).errors?.[0]?.loc).toEqual(['grant_type']);
    const malformed = await tokenRequest({ authorization: auth }, '{"grant_type":');
    expect(envelopeOf(malformed).errors).toEqual([]);
  });
});

describe('bearer checks on API calls', () => {
  it('accepts a fresh token, then 401s it once expired', async () => {
    const short = await startSandbox({ consumers: 1, tokenTtlSeconds: 1 });
    try {
      const url = `${short.baseUrl}${rewardsPath}`;
      const answer = await call(`${short.baseUrl}/tokens`, {
        method: 'POST',
        headers: {
          authorization: basicAuth(short.clientId, short.clientSecret),
          'x-api-version': '2.0.0',
        },
      });
      const { access_token: token, expires_in } = answer.json() as Record<string, string>;
      expect(expires_in).toBe(1);
      expect((await call(url, { headers: apiHeaders(String(token)) })).status).toBe(200);
      await new Promise((resolve) => setTimeout(resolve, 1050));
      const expired = await call(url, { headers: apiHeaders(String(token)) });
      expect(expired.status).toBe(401);
      expect(envelopeOf(expired).code).toBe('ERR-401-00');
    } finally {
      await short.close();
    }
  });

  it('401s missing, garbage and foreign-key tokens', async () => {
    const other = await startSandbox();
    try {
      const foreign = await fetchToken(other);
      const headers = [
        { 'x-api-version': '2.0.0' },
        apiHeaders('not-a-jwt'),
        apiHeaders('eyJhbGciOiJFUzI1NiJ9.e30.AAAA'),
        apiHeaders(foreign),
        { ...apiHeaders('x'), authorization: 'Token abc' },
      ];
      for (const h of headers) {
        const answer = await call(`${sandbox.baseUrl}${rewardsPath}`, { headers: h });
        expect(answer.status).toBe(401);
        expect(envelopeOf(answer)).toMatchObject({ code: 'ERR-401-00', title: 'Unauthorized' });
      }
    } finally {
      await other.close();
    }
  });

  it('403s a valid token without PERKS or ALL, or for another program or environment', async () => {
    const tokens = [
      await sandbox.mintToken({ scopes: ['LOYALTIES'] }),
      await sandbox.mintToken({ scopes: ['PERKS'], program: 'other-program' }),
      await sandbox.mintToken({ scopes: ['PERKS'], environment: 'production' }),
    ];
    for (const token of tokens) {
      const answer = await call(`${sandbox.baseUrl}${rewardsPath}`, { headers: apiHeaders(token) });
      expect(answer.status).toBe(403);
      expect(envelopeOf(answer).code).toBe('ERR-403-00');
    }
    const all = await sandbox.mintToken({ scopes: ['ALL'] });
    const ok = await call(`${sandbox.baseUrl}${rewardsPath}`, { headers: apiHeaders(all) });
    expect(ok.status).toBe(200);
  });

  it('gives a client configured without PERKS tokens that get 403', async () => {
    const limited = await startSandbox({ consumers: 1, scopes: ['LOYALTIES', 'TX_INJECTION'] });
    try {
      const token = await fetchToken(limited);
      const answer = await call(`${limited.baseUrl}${rewardsPath}`, { headers: apiHeaders(token) });
      expect(answer.status).toBe(403);
    } finally {
      await limited.close();
    }
  });

  it('revokes every current token, in process and through the control API', async () => {
    const url = `${sandbox.baseUrl}${rewardsPath}`;
    const first = await fetchToken(sandbox);
    sandbox.state.revokeTokens();
    expect((await call(url, { headers: apiHeaders(first) })).status).toBe(401);
    const second = await fetchToken(sandbox);
    expect((await call(url, { headers: apiHeaders(second) })).status).toBe(200);
    const revoke = await call(`${sandbox.baseUrl}/_sandbox/tokens/revoke`, { method: 'POST' });
    expect(revoke.status).toBe(204);
    expect((await call(url, { headers: apiHeaders(second) })).status).toBe(401);
  });
});

describe('API clients', () => {
  it('are created through the control API; a deleted one mints no more, its tokens live on', async () => {
    const clients = `${sandbox.baseUrl}/_sandbox/clients`;
    const created = await call(clients, { method: 'POST' });
    expect(created.status).toBe(201);
    const { client_id: id, client_secret: secret } = created.json() as Record<string, string>;
    expect(secret).toMatch(/^sk_sandbox_\S+$/);
    const minted = await tokenRequest({ authorization: basicAuth(id ?? '', secret ?? '') });
    expect(minted.status).toBe(200);
    const token = (minted.json() as { access_token: string }).access_token;

    expect((await call(`${clients}/${id}`, { method: 'DELETE' })).status).toBe(204);
    const refused = await tokenRequest({ authorization: basicAuth(id ?? '', secret ?? '') });
    expect(envelopeOf(refused)).toMatchObject({ status: 401, code: 'ERR-401-00' });
    const url = `${sandbox.baseUrl}${rewardsPath}`;
    expect((await call(url, { headers: apiHeaders(token) })).status).toBe(200);
    expect((await call(`${clients}/${id}`, { method: 'DELETE' })).status).toBe(404);
    await fetchToken(sandbox); // the first client is not touched
  });
});

describe('x-api-version', () => {
  it('400s a missing or unknown version with a clear title', async () => {
    const token = await fetchToken(sandbox);
    const url = `${sandbox.baseUrl}${rewardsPath}`;
    const missing = await call(url, { headers: { authorization: `Bearer ${token}` } });
    expect(missing.status).toBe(400);
    expect(envelopeOf(missing)).toMatchObject({
      code: 'ERR-400-01',
      title: 'Missing API Version',
      errors: [{ loc: ['header', 'x-api-version'], type: 'missing' }],
    });
    const unknown = await call(url, {
      headers: { ...apiHeaders(token), 'x-api-version': '3.0.0' },
    });
    expect(unknown.status).toBe(400);
    expect(envelopeOf(unknown)).toMatchObject({
      code: 'ERR-400-02',
      title: 'Unsupported API Version',
    });
  });

  it('is mandatory on POST /tokens too: no token without it', async () => {
    const before = sandbox.state.counters().tokensMinted;
    const auth = basicAuth(sandbox.clientId, sandbox.clientSecret);
    const missing = await tokenRequest({ authorization: auth, 'x-api-version': '' });
    expect(envelopeOf(missing)).toMatchObject({ status: 400, code: 'ERR-400-01' });
    const unknown = await tokenRequest({ authorization: auth, 'x-api-version': '9.9.9' });
    expect(envelopeOf(unknown)).toMatchObject({ status: 400, code: 'ERR-400-02' });
    expect(sandbox.state.counters().tokensMinted).toBe(before);
  });
});

describe('Basic credentials (RFC 6749 §2.3.1)', () => {
  it('form-urlencodes the id and the secret before base64, so `:` and `%` arrive intact', async () => {
    const clientSecret = 'sk_sandbox_a:b%25c+d%';
    const own = await startSandbox({ consumers: 1, clientId: 'cli:1 x', clientSecret });
    try {
      const header = basicCredentials('cli:1 x', clientSecret);
      expect(Buffer.from(header, 'base64').toString()).toBe(
        'cli%3A1+x:sk_sandbox_a%3Ab%2525c%2Bd%25',
      );
      const client = new PerksClient({ baseUrl: own.baseUrl, clientId: 'cli:1 x', clientSecret });
      try {
        await expect(client.getReward('sbx_0001', crypto.randomUUID())).rejects.toMatchObject({
          code: 'ERR-404-00',
        });
        expect(own.state.counters().tokensMinted).toBe(1);
      } finally {
        await client.close();
      }
    } finally {
      await own.close();
    }
  });
});
