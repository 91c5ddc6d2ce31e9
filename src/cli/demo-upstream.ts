/**
 * What the demo's sandbox holds and does upstream: the customers and their rewards, the faults
 * armed before the worker runs, the changes the reconciliation must find, and why the
 * datastore's figures then differ from upstream's by design.
 */
import type { Sandbox } from '../sandbox/index.js';

/** Customer ids as a client's systems have them: some are valid consumer ids, some are not. */
export function demoUserIds(count: number): string[] {
  return Array.from({ length: count }, (_, i) =>
    i % 3 === 0 ? `customer-${String(i + 1).padStart(5, '0')}` : `user${i + 1}@example.com`,
  );
}

/**
 * Upstream before the worker runs: each customer has rewards waiting (the sandbox shows them
 * once enrolled); one in twenty is already enrolled (409); one has 2,500 rewards (3 pages).
 */
export function seedUpstream(sandbox: Sandbox, consumerIds: readonly string[]): void {
  consumerIds.forEach((id, i) => {
    const rewards = i === 1 ? 2500 : (i * 37) % 60;
    sandbox.state.addConsumer(id, { enrolled: i % 20 === 5, rewards });
  });
  const [first, second] = consumerIds;
  const { faults } = sandbox;
  if (first) {
    faults.inject({
      route: 'enroll',
      consumerId: first,
      count: 1,
      kind: 'delay',
      delayMs: 3500,
      applyWrite: true,
    });
  }
  if (second) {
    faults.inject({ route: 'listRewards', consumerId: second, count: 1, kind: 'html502' });
  }
  faults.inject({ route: 'listRewards', count: 2, kind: 'status', status: 500 });
  faults.inject({ route: 'listRewards', count: 1, kind: 'throttle429', retryAfterSeconds: 2 });
}

/**
 * Moves about a fifth of the VALIDATED rewards to PAID_IN and removes a few, upstream. A
 * reward can be both moved and removed: the re-sync never sees its new status.
 */
export function moveStatuses(
  sandbox: Sandbox,
  consumerIds: readonly string[],
): { moved: number; removed: number; movedAndRemoved: number } {
  const moved = new Set<string>();
  for (const id of consumerIds) {
    const rewards = sandbox.state.rewardsOf(id) as { id: string; status: string }[];
    for (const [i, reward] of rewards.entries()) {
      if (reward.status === 'VALIDATED' && i % 5 === 0) {
        sandbox.state.setRewardStatus(id, reward.id, 'PAID_IN');
        moved.add(reward.id);
      }
    }
  }
  let removed = 0;
  let movedAndRemoved = 0;
  for (const id of consumerIds.slice(2, 5)) {
    const [reward] = sandbox.state.rewardsOf(id) as { id: string }[];
    if (!reward) continue;
    sandbox.state.removeReward(id, reward.id);
    removed += 1;
    if (moved.has(reward.id)) movedAndRemoved += 1;
  }
  return { moved: moved.size, removed, movedAndRemoved };
}

/** Why the datastore's figures and upstream's differ, in this demo by design. */
export function differences(
  upstream: { moved: number; movedAndRemoved: number; created: number },
  datastore: { statusChanges: number; enrolledCreated: number },
): string[] {
  const lines: string[] = [];
  if (upstream.movedAndRemoved > 0) {
    lines.push(
      `  - ${upstream.moved} rewards moved upstream, ${datastore.statusChanges} status changes recorded: ${upstream.movedAndRemoved} moved reward(s) were also removed before the re-sync read them, so they show as missing upstream, not as a change.`,
    );
  }
  const lateCreates = upstream.created - datastore.enrolledCreated;
  if (lateCreates > 0) {
    lines.push(
      `  - upstream created ${upstream.created} consumers, the datastore says ${datastore.enrolledCreated} created: ${lateCreates} POST /perks/consumers timed out after the API had applied it; the retry got 409, which counts as success, so the consumer is recorded as already enrolled.`,
    );
  }
  return lines.length > 0
    ? ['two honest differences between upstream and the datastore:', ...lines]
    : [];
}
