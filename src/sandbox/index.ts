/** The Perks API sandbox: an independent simulator of the API, failures included. */
export type { RewardJson } from './rewards.js';
export { loadScenario, type Scenario } from './scenario.js';
export { type Sandbox, type SandboxOptions, sandboxApiEnv, startSandbox } from './server.js';
export type { SandboxState } from './state.js';
