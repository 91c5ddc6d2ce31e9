/**
 * The credentials this process mints with. Those given as files (`PERKS_CLIENT_ID_FILE`,
 * `PERKS_CLIENT_SECRET_FILE`) are read again when the token endpoint refuses them and on
 * SIGHUP, so a rotation needs no restart. Logs name the client id, never the secret.
 */
import { type PerksConfig, type PerksCredentials, rereadCredentials } from '../config.js';
import type { Logger } from '../ops/logger.js';
import type { CredentialSource } from '../perks/client.js';

export function credentialSource(perks: PerksConfig, logger: Logger): CredentialSource {
  let current: PerksCredentials = perks;
  let saidFixed = false;
  return {
    current: () => current,
    reread(why) {
      const was = current.clientId;
      if (!perks.clientIdFile && !perks.clientSecretFile) {
        // Once for the refusals (one a failed mint), at every SIGHUP (an operator asks).
        const say = !saidFixed || why === 'SIGHUP';
        if (say) logger.warn({ why }, 'perks api: credentials are variables: none to read again');
        saidFixed = true;
        return false;
      }
      try {
        const next = rereadCredentials(perks);
        const changed = was !== next.clientId || current.clientSecret !== next.clientSecret;
        const fields = { why, was, clientId: next.clientId, changed };
        if (changed || why === 'SIGHUP') logger.info(fields, 'perks api: credentials read again');
        current = next;
        return changed;
      } catch (error) {
        const err = { message: (error as Error).message };
        logger.error({ why, err }, 'perks api: credentials unreadable; the current ones stay');
        return false;
      }
    },
  };
}
