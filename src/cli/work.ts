import { StoppedBeforeStartError, startPerksWorker } from '../app.js';
import { configGroups, loadConfig } from '../config.js';
import { createLogger } from '../ops/logger.js';
import { shutdownSignal } from '../ops/shutdown.js';

/** `skipMigrate`: a deploy step runs `migrate`. */
export async function run({ skipMigrate }: { skipMigrate?: boolean }): Promise<number> {
  const config = loadConfig(configGroups);
  const logger = createLogger(config.log, { pid: process.pid });
  const stopping = shutdownSignal();
  // Not a hang-up: the credentials' files were rewritten (a rotation), read them again. Taken
  // from the start (a SIGHUP with no listener ends the process); one during the start is read
  // once the runtime is up.
  let hungUp = false;
  let reread: (() => void) | undefined;
  process.on('SIGHUP', () => {
    if (reread) reread();
    else hungUp = true;
  });
  const app = await startPerksWorker(config, { logger, stopping, skipMigrate }).catch(
    async (error) => {
      if (!(error instanceof StoppedBeforeStartError)) throw error;
      logger.info({ signal: await stopping }, error.message);
    },
  );
  if (!app) return 0;
  reread = () => void app.runtime.rereadCredentials();
  if (hungUp) reread();
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
