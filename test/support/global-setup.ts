/**
 * Finds the Redis and PostgreSQL the integration tests run against, and prepares a template
 * database that every test file clones (see services.ts).
 *
 * REDIS_URL / DATABASE_URL win. When both are unset and a Docker engine answers,
 * testcontainers starts redis:7 and postgres:16. Otherwise the run stops here with a message
 * saying how to provide them: integration tests are never skipped silently.
 */
import type { TestProject } from 'vitest/node';
import { dropTestDatabases, prepareTemplateDatabase } from './database.js';
import { pingRedis } from './redis.js';

declare module 'vitest' {
  interface ProvidedContext {
    redisUrl: string;
    /** A database the tests' user can CREATE DATABASE from. */
    adminDatabaseUrl: string;
    templateDatabase: string;
  }
}

const howToProvide = `Integration tests need Redis and PostgreSQL. Either:
  - export REDIS_URL=redis://127.0.0.1:6379 DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres
    (DATABASE_URL's user must be allowed to CREATE DATABASE), or
  - leave both unset with a running Docker engine: testcontainers starts redis:7 and postgres:16, or
  - start local services with \`docker compose up -d redis postgres\` and export the URLs above.`;

type Stop = () => Promise<void>;

export default async function setup(project: TestProject): Promise<Stop> {
  const stops: Stop[] = [];
  let redisUrl = process.env.REDIS_URL;
  let databaseUrl = process.env.DATABASE_URL;

  if (!redisUrl || !databaseUrl) {
    if (!(await dockerAnswers())) {
      const missing = [!redisUrl && 'REDIS_URL', !databaseUrl && 'DATABASE_URL'].filter(Boolean);
      throw new Error(
        `${missing.join(' and ')} unset and no Docker engine answers.\n${howToProvide}`,
      );
    }
    const started = await startContainers({ redis: !redisUrl, postgres: !databaseUrl });
    redisUrl ??= started.redisUrl;
    databaseUrl ??= started.databaseUrl;
    stops.push(started.stop);
  }
  if (!redisUrl || !databaseUrl) throw new Error(howToProvide);

  await pingRedis(redisUrl).catch((error: unknown) => {
    throw new Error(`Redis at ${redisUrl} does not answer (${String(error)}).\n${howToProvide}`);
  });
  await dropTestDatabases(databaseUrl).catch((error: unknown) => {
    throw new Error(
      `PostgreSQL at ${redact(databaseUrl)} does not answer (${String(error)}).\n${howToProvide}`,
    );
  });
  const templateDatabase = await prepareTemplateDatabase(databaseUrl);

  project.provide('redisUrl', redisUrl);
  project.provide('adminDatabaseUrl', databaseUrl);
  project.provide('templateDatabase', templateDatabase);

  return async () => {
    await dropTestDatabases(databaseUrl, { own: true });
    for (const stop of stops.reverse()) await stop();
  };
}

function redact(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
}

async function dockerAnswers(): Promise<boolean> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

async function startContainers(want: { redis: boolean; postgres: boolean }) {
  const { GenericContainer, Wait } = await import('testcontainers');
  const stops: Stop[] = [];
  let redisUrl: string | undefined;
  let databaseUrl: string | undefined;
  if (want.redis) {
    const redis = await new GenericContainer('redis:7')
      .withExposedPorts(6379)
      .withWaitStrategy(Wait.forLogMessage('Ready to accept connections'))
      .start();
    redisUrl = `redis://${redis.getHost()}:${redis.getMappedPort(6379)}`;
    stops.push(async () => void (await redis.stop()));
  }
  if (want.postgres) {
    const postgres = await new GenericContainer('postgres:16')
      .withEnvironment({ POSTGRES_HOST_AUTH_METHOD: 'trust' })
      .withExposedPorts(5432)
      .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
      .start();
    databaseUrl = `postgres://postgres@${postgres.getHost()}:${postgres.getMappedPort(5432)}/postgres`;
    stops.push(async () => void (await postgres.stop()));
  }
  return {
    redisUrl,
    databaseUrl,
    stop: async () => {
      for (const stop of stops) await stop();
    },
  };
}
