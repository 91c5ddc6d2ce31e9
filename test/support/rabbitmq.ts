/**
 * The RabbitMQ the AMQP intake tests run against: AMQP_URL, else the machine's broker on
 * 127.0.0.1:5672 (guest/guest), started with `rabbitmq-server -detached` when it is down.
 * Broker-side faults go through `rabbitmqctl` and touch only this process's connections.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { Connection } from 'rabbitmq-client';

const run = promisify(execFile);

export const amqpUrl = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

/** A queue name of its own for one test, e.g. `perks.signups.test-3fa9c2d1`. */
export function testAmqpQueue(): string {
  return `perks.signups.test-${randomBytes(4).toString('hex')}`;
}

/** Resolves once the broker accepts a connection; starts the local one if it is down. */
export async function ensureBroker(timeoutMs = 60_000): Promise<void> {
  if (await answers(amqpUrl)) return;
  if (process.env.AMQP_URL === undefined) {
    spawn('rabbitmq-server', ['-detached'], { stdio: 'ignore', detached: true })
      .on('error', () => {})
      .unref();
  }
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await answers(amqpUrl)) return;
    await new Promise((r) => setTimeout(r, 1000));
  }
  throw new Error(
    `RabbitMQ at ${amqpUrl.replace(/:[^:@/]*@/, ':***@')} does not answer: start it (\`rabbitmq-server -detached\`) or set AMQP_URL`,
  );
}

async function answers(url: string): Promise<boolean> {
  const connection = new Connection({ url, retryLow: 200, retryHigh: 200 });
  connection.on('error', () => {});
  try {
    await connection.onConnect(3000, true);
    return true;
  } catch {
    return false;
  } finally {
    connection.unsafeDestroy();
  }
}

/**
 * Closes, from the broker's side, the connections whose client-given name contains
 * `namePart`: what clients see when the broker shuts down (320 CONNECTION_FORCED).
 * Resolves with how many were closed.
 */
export async function closeBrokerConnections(namePart: string): Promise<number> {
  const { stdout } = await run('rabbitmqctl', ['list_connections', 'pid', 'client_properties']);
  const pids = stdout
    .split('\n')
    .filter((line) => line.startsWith('<') && line.includes(namePart))
    .map((line) => line.split('\t')[0] ?? '');
  for (const pid of pids) {
    await run('rabbitmqctl', ['close_connection', pid, 'closed by the test']);
  }
  return pids.length;
}

/** Messages in a queue, ready and unacked together (a passive declare counts only ready). */
export async function queueDepth(queue: string): Promise<number> {
  const { stdout } = await run('rabbitmqctl', ['list_queues', 'name', 'messages', '-q']);
  for (const line of stdout.split('\n')) {
    const [name, messages] = line.split('\t');
    if (name === queue) return Number(messages);
  }
  throw new Error(`no queue ${queue}`);
}
