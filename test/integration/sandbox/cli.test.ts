import { PassThrough } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import { runCli } from '../../../src/cli/program.js';
import { run } from '../../../src/cli/sandbox.js';
import { UsageError } from '../../../src/errors.js';
import { apiHeaders, basicAuth, call } from './http.js';

async function firstOutput(stream: PassThrough): Promise<string> {
  const chunk: Buffer = await new Promise((resolve) => stream.once('data', resolve));
  return chunk.toString();
}

describe('perks-worker sandbox', () => {
  it('prints the base URL and env lines, serves, and stops with status 0', async () => {
    const stdout = new PassThrough();
    const stop = new AbortController();
    const printed = firstOutput(stdout);
    const exit = run(
      {
        // Every interface: the URL printed is the loopback one, which clients can use.
        host: '0.0.0.0',
        port: 0,
        consumers: 3,
        seed: 9,
        tokenTtl: 60,
        rewardsMin: 0,
        rewardsOnEnroll: 3,
      },
      { signal: stop.signal, stdout },
    );
    const text = await printed;
    const baseUrl = /listening on (http:\/\/127\.0\.0\.1:\d+) /.exec(text)?.[1];
    expect(baseUrl).toBeDefined();
    expect(text).toBe(
      [
        `Perks sandbox listening on ${baseUrl} (3 consumers, seed 9)`,
        `  PERKS_BASE_URL=${baseUrl}`,
        '  PERKS_CLIENT_ID=sandbox-client',
        '  PERKS_CLIENT_SECRET=sk_sandbox_demo_secret',
        '',
      ].join('\n'),
    );
    const token = await call(`${baseUrl}/tokens`, {
      method: 'POST',
      headers: {
        authorization: basicAuth('sandbox-client', 'sk_sandbox_demo_secret'),
        'x-api-version': '2.0.0',
      },
    });
    expect(token.json()).toMatchObject({ expires_in: 60 });
    // A consumer enrolled through the API has a few rewards, so a newcomer's own enrollments
    // show data.
    const headers = apiHeaders((token.json() as { access_token: string }).access_token);
    const enrolled = await call(`${baseUrl}/perks/consumers`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ id: 'newcomer_1' }),
    });
    expect(enrolled.status).toBe(201);
    const rewards = await call(`${baseUrl}/perks/consumers/newcomer_1/rewards`, { headers });
    expect((rewards.json() as { meta: { total: number } }).meta.total).toBe(3);
    stop.abort();
    expect(await exit).toBe(0);
    await expect(call(`${baseUrl}/_sandbox/health`)).rejects.toThrow();
  });

  it.each([
    [['--port', 'abc'], /--port must be a whole number from 0 to 65535, got "abc"/],
    [['--consumers', '-1'], /--consumers/],
    [['--rate-limit', '0'], /--rate-limit/],
    [['--rewards-min', '10', '--rewards-max', '5'], /--rewards-max \(5\) must not be below/],
    [['--latency-ms', '1.5'], /--latency-ms/],
    [['--rewards-on-enroll', 'many'], /--rewards-on-enroll/],
    [['--bogus'], /bogus/],
    [['--scenario', '/nonexistent/file.json'], /scenario \/nonexistent\/file\.json/],
  ])('rejects %j with one precise UsageError', async (argv, message) => {
    const sandbox = () => runCli(['sandbox', ...argv], '0.0.0');
    await expect(sandbox()).rejects.toThrow(UsageError);
    await expect(sandbox()).rejects.toThrow(message);
  });

  it('prints its help', async () => {
    const out: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => out.push(String(chunk)) > 0);
    try {
      expect(await runCli(['sandbox', '--help'], '0.0.0')).toBe(0);
    } finally {
      vi.restoreAllMocks();
    }
    expect(out.join('')).toContain('--rate-limit <n>');
  });
});
