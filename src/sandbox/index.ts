/** The Perks API sandbox: an independent simulator of the API, failures included. */
export type { RewardSort } from './consumer-rewards.js';
export type { ApiRoute, Fault, FaultController, FaultRoute } from './faults.js';
export type { RewardJson } from './rewards.js';
export { loadScenario, type Scenario } from './scenario.js';
export { type Sandbox, type SandboxOptions, sandboxApiEnv, startSandbox } from './server.js';
export type { RequestLogEntry, SandboxCounters } from './state.js';
export { type RewardsPerConsumer, SandboxLookupError, type SandboxState } from './state.js';
