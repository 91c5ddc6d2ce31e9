import type pg from 'pg';

/**
 * Runs `work` in one transaction on a connection of the pool; rolls back when it throws. The
 * pool does not listen to a connection it has lent: one lost meanwhile would raise an unhandled
 * 'error' (the query in flight rejects as well), and is discarded rather than lent again.
 */
export async function inTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  const onError = (error: Error) => {
    broken = error;
  };
  client.on('error', onError);
  try {
    await client.query('begin');
    const result = await work(client);
    await client.query('commit');
    return result;
  } catch (error) {
    await client.query('rollback').catch((e: unknown) => {
      broken = e instanceof Error ? e : new Error(String(e));
    });
    throw error;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}
