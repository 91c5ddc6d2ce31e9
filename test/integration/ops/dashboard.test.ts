/**
 * The bull-board dashboard on the operations server: basic auth on every path below
 * /dashboard, the page and all its own assets load, its API lists our queues with a failed
 * job, it is read-only, and without a password there is no dashboard at all (404).
 * (The rendering itself is checked in headless Chromium: test/e2e/ops-dashboard.test.ts.)
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { basicAuthChecker } from '../../../src/ops/dashboard.js';
import { closeServer, startOpsServer } from '../../../src/ops/health.js';
import { enqueueEnrollment } from '../../../src/queues/producer.js';
import { type Rig, rigConsumerIdKey, startRig } from './rig.js';

const user = 'oncall';
const password = 'correct-horse-battery-staple';
const auth = { authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}` };

let rig: Rig;
beforeAll(async () => {
  rig = await startRig({ env: { DASHBOARD_USER: user, DASHBOARD_PASSWORD: password } });
  rig.sandbox.state.addConsumer('dash-ok', { enrolled: false, rewards: 2 });
  await enqueueEnrollment(rig.runtime.ctx.queues, { consumerId: 'dash-ok' }, rigConsumerIdKey);
  await rig.runtime.ctx.queues.enrollment.add('enroll', { nonsense: true }); // fails at once
  await rig.idle();
});
afterAll(async () => {
  await rig?.close();
});

describe('basicAuthChecker', () => {
  const check = basicAuthChecker('admin', 's3cret-password');
  const header = (text: string) => `Basic ${Buffer.from(text).toString('base64')}`;

  it('accepts the right user and password only', () => {
    expect(check(header('admin:s3cret-password'))).toBe(true);
    expect(check(`basic   ${Buffer.from('admin:s3cret-password').toString('base64')}`)).toBe(true);
    expect(check(header('admin:s3cret-passwor'))).toBe(false);
    expect(check(header('admin:s3cret-password!'))).toBe(false);
    expect(check(header('root:s3cret-password'))).toBe(false);
    expect(check(header(':'))).toBe(false);
    expect(check(undefined)).toBe(false);
    expect(check('')).toBe(false);
    expect(check('Bearer abc')).toBe(false);
    expect(check('Basic !!!')).toBe(false);
  });
});

describe('/dashboard', () => {
  it('asks for credentials on every path below it, and refuses wrong ones', async () => {
    for (const path of [
      '/dashboard',
      '/dashboard/',
      '/dashboard/api/queues',
      '/dashboard/static/x',
    ]) {
      const anonymous = await fetch(`${rig.opsUrl}${path}`);
      expect(anonymous.status, path).toBe(401);
      expect(anonymous.headers.get('www-authenticate')).toMatch(/^Basic realm=/);
      await anonymous.text();
    }
    const wrong = await fetch(`${rig.opsUrl}/dashboard`, {
      headers: { authorization: `Basic ${Buffer.from(`${user}:nope`).toString('base64')}` },
    });
    expect(wrong.status).toBe(401);
    await wrong.text();
  });

  it('serves the page and every asset it references', async () => {
    const page = await fetch(`${rig.opsUrl}/dashboard`, { headers: auth });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    const html = await page.text();
    expect(html).toContain('<base href="/dashboard/"');
    expect(html).toContain('<title>perks-worker</title>');

    // Scripts and styles of bull-board itself (relative to the base href), not web fonts.
    const assets = [...html.matchAll(/(?:src|href)="([^"]+\.(?:js|css))"/g)]
      .map(([, ref]) => ref ?? '')
      .filter((ref) => !/^https?:/.test(ref));
    expect(assets.length).toBeGreaterThan(0);
    for (const ref of assets) {
      const url = new URL(ref, `${rig.opsUrl}/dashboard/`);
      const asset = await fetch(url, { headers: auth });
      expect(asset.status, url.pathname).toBe(200);
      expect((await asset.arrayBuffer()).byteLength, url.pathname).toBeGreaterThan(100);
    }
  });

  it('lists the queues with their counts through its API, read-only', async () => {
    const response = await fetch(`${rig.opsUrl}/dashboard/api/queues`, { headers: auth });
    expect(response.status).toBe(200);
    const body = (await response.json()) as {
      queues: { name: string; readOnlyMode: boolean; counts: Record<string, number> }[];
    };
    const byName = new Map(body.queues.map((q) => [q.name, q]));
    expect([...byName.keys()].sort()).toEqual([
      'enrollment',
      'reconciliation',
      'reward-sync',
      'webhooks',
    ]);
    expect(byName.get('enrollment')?.counts).toMatchObject({ completed: 1, failed: 1 });
    expect(byName.get('reward-sync')?.counts).toMatchObject({ completed: 1 });
    for (const queue of body.queues) expect(queue.readOnlyMode).toBe(true);

    // A write through the dashboard is refused; the failed job stays failed.
    const retry = await fetch(`${rig.opsUrl}/dashboard/api/queues/enrollment/retry/failed`, {
      method: 'PUT',
      headers: auth,
    });
    expect(retry.status).toBeGreaterThanOrEqual(400);
    await retry.text();
    expect(await rig.runtime.ctx.queues.enrollment.getFailedCount()).toBe(1);
  });

  it('does not exist without a password: /dashboard is 404', async () => {
    const server = await startOpsServer({
      port: 0,
      host: '127.0.0.1',
      checks: [],
      logger: pino({ level: 'silent' }),
    });
    try {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      for (const path of ['/dashboard', '/dashboard/api/queues']) {
        const response = await fetch(`http://127.0.0.1:${port}${path}`, { headers: auth });
        expect(response.status, path).toBe(404);
        await response.text();
      }
    } finally {
      await closeServer(server);
    }
  });
});
