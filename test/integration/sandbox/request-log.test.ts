import { describe, expect, it } from 'vitest';
import { RequestLog } from '../../../src/sandbox/state.js';

const entry = (n: number) => ({ method: 'GET', path: `/p/${n}`, status: 200, at: 'now' });

describe('RequestLog', () => {
  it('keeps the last entries, oldest first, once full', () => {
    const log = new RequestLog(3);
    for (let n = 1; n <= 2; n++) log.add(entry(n));
    expect(log.list().map((e) => e.path)).toEqual(['/p/1', '/p/2']);
    for (let n = 3; n <= 7; n++) log.add(entry(n));
    expect(log.list().map((e) => e.path)).toEqual(['/p/5', '/p/6', '/p/7']);
    log.clear();
    expect(log.list()).toEqual([]);
    log.add(entry(8));
    expect(log.list().map((e) => e.path)).toEqual(['/p/8']);
  });
});
