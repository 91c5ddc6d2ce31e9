/**
 * bull-board under /dashboard of the ops server, behind basic auth, read-only (retries go through
 * `failed --retry`: a browser tab never cleans a queue); loaded only with DASHBOARD_PASSWORD.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Queue } from 'bullmq';
import type { Route } from './health.js';
import { LoginThrottle } from './login-throttle.js';

export const dashboardPath = '/dashboard';

export interface DashboardOptions {
  queues: readonly Queue[];
  user: string;
  /** Never logged; compared in constant time. */
  password: string;
}

/** bull-board's Express app: a route's request and response, then what to call when unmatched. */
type ExpressApp = (...args: [...Parameters<Route>, next: (err?: unknown) => void]) => void;

export async function createDashboard(options: DashboardOptions): Promise<Route> {
  const [{ createBullBoard }, { BullMQAdapter }, { ExpressAdapter }] = await Promise.all([
    import('@bull-board/api'),
    import('@bull-board/api/bullMQAdapter'),
    import('@bull-board/express'),
  ]);
  const serverAdapter = new ExpressAdapter();
  serverAdapter.setBasePath(dashboardPath);
  createBullBoard({
    queues: options.queues.map((queue) => new BullMQAdapter(queue, { readOnlyMode: true })),
    serverAdapter,
    options: { uiConfig: { boardTitle: 'perks-worker' } },
  });
  const app = serverAdapter.getRouter() as ExpressApp;
  const checkCredentials = basicAuthChecker(options.user, options.password);
  const throttle = new LoginThrottle();

  return async (req, res) => {
    const url = req.url ?? '/';
    const path = url.split('?')[0] ?? '/';
    if (path !== dashboardPath && !path.startsWith(`${dashboardPath}/`)) return false;
    const address = req.socket.remoteAddress ?? 'unknown';
    if (!checkCredentials(req.headers.authorization)) {
      // A browser's first request carries no credentials: only a wrong guess waits.
      if (req.headers.authorization !== undefined) await sleep(throttle.failed(address));
      res.writeHead(401, {
        'www-authenticate': 'Basic realm="perks-worker dashboard", charset="UTF-8"',
        'content-type': 'text/plain; charset=utf-8',
      });
      res.end('authentication required\n');
      return true;
    }
    throttle.succeeded(address);
    // bull-board's app routes from its own root: hand it the path below /dashboard.
    req.url = url.slice(dashboardPath.length) || '/';
    return new Promise<boolean>((resolve) => {
      res.once('finish', () => resolve(true));
      res.once('close', () => resolve(true));
      app(req, res, (err?: unknown) => {
        // Nothing in bull-board matched (or it failed): answer here.
        if (!res.headersSent) {
          res.writeHead(err ? 500 : 404, { 'content-type': 'text/plain; charset=utf-8' });
          res.end(err ? 'dashboard error\n' : 'not found\n');
        }
        resolve(true);
      });
    });
  };
}

/** Checks a Basic header; both sides hashed, the time says nothing of the guess's length. */
export function basicAuthChecker(user: string, password: string) {
  const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();
  const expected = digest(`${user}:${password}`);
  return (header: string | undefined) => {
    const match = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header ?? '');
    const given = match?.[1] ? Buffer.from(match[1], 'base64').toString('utf8') : '';
    // Always compare, even without a header, so that timing says nothing either.
    return timingSafeEqual(digest(given), expected) && match !== null;
  };
}
