/** `check`'s lines for what lies outside our own stores: the Perks API, RabbitMQ, the webhook. */
import { once } from 'node:events';
import { Connection } from 'rabbitmq-client';
import { Client } from 'undici';
import { type PerksConfig, redactUrl } from '../config.js';
import { describeError, errorCode } from '../errors.js';
import { within, withTimeout } from '../ops/timeouts.js';
import { PerksClient, probeIds } from '../perks/client.js';
import {
  AuthError,
  ConsumerNotEnrolledError,
  NotFoundError,
  PerksError,
  ResponseShapeError,
  ThrottledError,
  TokenMintError,
} from '../perks/errors.js';
import type { CheckResult } from './check-result.js';
import * as line from './check-result.js';

const timeoutMs = line.checkTimeoutMs;

/** A consumer and reward no program holds: the GET reads nothing and changes nothing. */

/**
 * Mints a token, then makes one GET with it, through the worker's own client (its TLS and
 * timeout rules). A 404 for the made-up consumer proves the token is accepted.
 */
export async function checkPerksApi(config: PerksConfig): Promise<CheckResult> {
  const target = redactUrl(config.baseUrl);
  const requestMs = Math.min(config.timeoutMs, timeoutMs);
  const client = new PerksClient({
    ...config,
    timeoutMs: requestMs,
    connections: 1,
    // One try: check reports what it sees now; the worker's retries are for jobs.
    retry: { attempts: 1 },
    maxInlineThrottleWaitMs: 0,
  });
  // Each request is bounded by requestMs; the slack covers a quick second one (the token
  // request again with a form body, or the GET after a re-mint): see PerksClient.
  const budget = requestMs + 1000;
  let stage: 'mint' | 'get' = 'mint';
  try {
    await withTimeout(client.checkCredentials(), budget);
    stage = 'get';
    await withTimeout(client.getReward(probeIds.consumerId, probeIds.rewardId), budget);
    return line.pass('perks api', target, 'token minted; a GET of a made-up consumer answered 200');
  } catch (error) {
    if (
      stage === 'get' &&
      (error instanceof ConsumerNotEnrolledError || error instanceof NotFoundError)
    ) {
      const detail = `token minted; a GET of a made-up consumer answered as expected (${answer(error)})`;
      return line.pass('perks api', target, detail);
    }
    return apiFailure(target, stage, error);
  } finally {
    await within(timeoutMs, client.close());
  }
}

/** `401 ERR-401-00: Unauthorized`; without a response, the transport's own phrase. */
function answer(error: PerksError): string {
  // `mintToken: ENOTFOUND getaddrinfo ENOTFOUND host`: the operation and the doubled code go.
  if (error.status === undefined) return error.message.replace(/^\w+: (?:(\S+) (?=.*\b\1\b))?/, '');
  const head = [error.status, error.code].filter((p) => p !== undefined).join(' ');
  return error.title ? `${head}: ${error.title}` : head;
}

/** Node's and OpenSSL's codes for a certificate the client does not trust. */
const untrustedCertificate =
  /^(CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|ERR_TLS_CERT_|HOSTNAME_MISMATCH)/;
/** Any other TLS failure: often a plain-http server on an https:// URL. */
const otherTls = /^(ERR_SSL_|ERR_TLS_)/;

/** For an error that got no HTTP answer: what the network said, and what to change. */
function unreachable(name: string, target: string, variable: string, error: unknown, before = '') {
  const code = (error instanceof PerksError ? error.code : undefined) ?? errorCode(error) ?? '';
  const failed = (what: string, text: string, fix: string) =>
    line.fail(name, target, `${before}${what} (${text})`, fix);
  // OpenSSL's own message runs over several lines: its code says it.
  if (untrustedCertificate.test(code)) {
    const fix =
      "the server's certificate is not trusted: fix it, or give your CA with NODE_EXTRA_CA_CERTS";
    return failed('TLS failed', code, fix);
  }
  if (otherTls.test(code)) {
    const fix = `check the scheme and port in ${variable}: the server may not speak TLS there`;
    return failed('TLS failed', code, fix);
  }
  const text = error instanceof PerksError ? answer(error) : describeError(error);
  const fix = ['ENOTFOUND', 'EAI_AGAIN'].includes(code)
    ? `check the host name in ${variable}`
    : `check ${variable}, and that this machine can reach it`;
  return failed('unreachable', text, fix);
}

const baseUrlFix = 'check PERKS_BASE_URL: it must be the base URL of your program';
const failingFix = 'the API is failing: try again later';

/** A failed token mint (`mint`) or GET after it: what the API said, and what to change. */
function apiFailure(target: string, stage: 'mint' | 'get', error: unknown): CheckResult {
  const failed = (detail: string, fix: string) => line.fail('perks api', target, detail, fix);
  const mint = stage === 'mint';
  const perks = error instanceof PerksError ? error : mint ? TokenMintError.from(error) : undefined;
  if (mint && perks?.cause instanceof ResponseShapeError) {
    const detail = `POST /tokens answered, but not with a token (${describeError(perks.cause)})`;
    return failed(detail, baseUrlFix);
  }
  if (perks?.status === undefined) {
    const before = mint ? 'token endpoint ' : 'token minted; GET ';
    return unreachable('perks api', target, 'PERKS_BASE_URL', error, before);
  }
  const { status } = perks;
  const said = answer(perks);
  if (mint && (status === 401 || status === 403)) {
    const fix =
      'check PERKS_CLIENT_ID and PERKS_CLIENT_SECRET (sandbox and production clients are separate)';
    return failed(`token mint refused (${said})`, fix);
  }
  if (mint && status === 429) {
    return failed(`token mint throttled (${said})`, 'wait a minute and run check again');
  }
  if (mint && status >= 500) return failed(`token endpoint failing (${said})`, failingFix);
  if (mint) return failed(`token request answered ${said}`, baseUrlFix);
  if (error instanceof AuthError) {
    const fix =
      'the client belongs to another program or environment than PERKS_BASE_URL, or lacks the PERKS scope';
    return failed(`token minted, but GET refused it (${said})`, fix);
  }
  if (error instanceof ThrottledError) {
    return failed(`token minted; GET throttled (${said})`, 'wait and run check again');
  }
  const fix = status >= 500 ? failingFix : 'check PERKS_BASE_URL and PERKS_API_VERSION';
  return failed(`token minted; GET answered ${said}`, fix);
}

/** Connects and disconnects: the queue itself is declared by `work`. */
export async function checkRabbitmq(url: string | undefined): Promise<CheckResult> {
  if (url === undefined) {
    return line.skip('rabbitmq', undefined, 'not configured (INTAKE_AMQP_URL unset)');
  }
  const target = redactUrl(url);
  const connection = new Connection({
    url,
    connectionName: 'perks-worker check',
    connectionTimeout: timeoutMs,
    retryLow: 1000,
    retryHigh: 1000,
  });
  // onConnect waits out its timeout through refusals: the first error is the answer.
  const firstError = once(connection, 'error').then(([error]) => Promise.reject(error));
  firstError.catch(() => undefined);
  try {
    await Promise.race([connection.onConnect(timeoutMs, true), firstError]);
    await within(timeoutMs, connection.close());
    return line.pass('rabbitmq', target, 'reachable');
  } catch (error) {
    connection.unsafeDestroy();
    if (errorCode(error) !== 'ACCESS_REFUSED') {
      return unreachable('rabbitmq', target, 'INTAKE_AMQP_URL', error);
    }
    const fix = 'check the user and password in INTAKE_AMQP_URL';
    return line.fail('rabbitmq', target, 'login refused (ACCESS_REFUSED)', fix);
  }
}

/**
 * A HEAD request: no event is delivered. Any HTTP answer but a redirect, even 405, proves the
 * receiver is reachable over a trusted connection; a redirect (a path's trailing slash, say) or
 * no answer is a ✗.
 */
export async function checkWebhook(url: string | undefined): Promise<CheckResult> {
  if (url === undefined)
    return line.skip('webhook', undefined, 'not configured (WEBHOOK_URL unset)');
  const parsed = new URL(url);
  // The query may carry a receiver's token: it is not shown.
  const target = redactUrl(`${parsed.origin}${parsed.pathname}`);
  const client = new Client(parsed.origin, {
    connect: { timeout: timeoutMs },
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  try {
    // Past the timeout, destroy() below aborts the request.
    const request = client.request({
      method: 'HEAD',
      path: `${parsed.pathname}${parsed.search}`,
      headers: { 'user-agent': 'perks-worker check' },
    });
    const response = await withTimeout(request, timeoutMs);
    await response.body.dump();
    const status = response.statusCode;
    if (status >= 300 && status < 400) {
      const why = `HEAD answered ${status}, a redirect: deliveries do not follow redirects`;
      return line.fail('webhook', target, why, 'set WEBHOOK_URL to the address it redirects to');
    }
    return line.pass('webhook', target, `reachable (HEAD answered ${status})`);
  } catch (error) {
    return unreachable('webhook', target, 'WEBHOOK_URL', error);
  } finally {
    await within(timeoutMs, client.destroy());
  }
}
