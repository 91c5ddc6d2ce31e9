import { StoppedBeforeStartError, startPerksWorker } from '../app.js';
import { configGroups, loadConfig } from '../config.js';
import { createLogger } from '../ops/logger.js';
import { shutdownSignal } from '../ops/shutdown.js';
import { onHangup } from './hangups.js';

/** `skipMigrate`: a deploy step runs `migrate`. */
export async function run({ skipMigrate }: { skipMigrate?: boolean }): Promise<number> {
  const config = loadConfig(configGroups);
  const logger = createLogger(config.log, { pid: process.pid });
  const stopping = shutdownSignal();
  const app = await startPerksWorker(config, { logger, stopping, skipMigrate }).catch(
    async (error) => {
      if (!(error instanceof StoppedBeforeStartError)) throw error;
      logger.info({ signal: await stopping }, error.message);
    },
  );
  if (!app) return 0;
  // Not a hang-up: the credentials' files were rewritten (a rotation), read them again.
  onHangup(() => void app.runtime.rereadCredentials());
  const signal = await stopping;
  const timeoutMs = config.worker.shutdownTimeoutMs;
  logger.info({ signal, timeoutMs }, 'shutting down: finishing active jobs');
  const { timedOut } = await app.close();
  logger.info({ timedOut }, 'worker stopped');
  // Everything is closed; a reconnecting socket left behind (Redis still down) must not keep
  // the process alive. The timer is unref'd: a clean exit never waits for it.
  setTimeout(() => process.exit(0), 2000).unref();
  return 0;
}
