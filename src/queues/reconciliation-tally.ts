/** Moved to src/reconciliation/tally.ts; kept for the callers not yet pointed there. */
export { readTally, type Tally, type TallyStore } from '../reconciliation/tally.js';
