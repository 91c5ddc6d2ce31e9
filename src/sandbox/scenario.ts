/** `sandbox --scenario file.json`: extra consumers, settings and faults to start with. */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { faultSchema } from './faults.js';

/** A consumer to add: also the body of the control API's POST /_sandbox/consumers. */
export const consumerSchema = z.strictObject({
  id: z.string().min(1),
  enrolled: z.boolean().optional(),
  rewards: z.int().min(0).max(1_000_000).optional(),
});
export const latencySchema = z.int().min(0).max(600_000).optional();

const scenarioSchema = z.strictObject({
  consumers: z.array(consumerSchema).optional(),
  latencyMs: latencySchema,
  rateLimitPerSecond: z.number().positive().optional(),
  faults: z.array(faultSchema).optional(),
});

export type Scenario = z.infer<typeof scenarioSchema>;

export async function loadScenario(file: string): Promise<Scenario> {
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(file, 'utf8'));
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message.split('\n')[0];
    throw new Error(`scenario ${file}: cannot read it as JSON (${reason})`);
  }
  const parsed = scenarioSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue?.path.join('.') || '(root)';
    throw new Error(`scenario ${file}: ${where}: ${issue?.message ?? 'invalid'}`);
  }
  return parsed.data;
}
