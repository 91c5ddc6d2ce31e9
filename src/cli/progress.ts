/**
 * Progress of long CLI work on stderr (stdout keeps the results): a cli-progress bar on a
 * terminal, otherwise (a pipe, a CI log) a plain line every 5 s and at the end.
 */
import { SingleBar } from 'cli-progress';

export interface Progress {
  /** `done` of `total` so far; `detail` is shown after the figures (e.g. "3 failed"). */
  update(done: number, total: number, detail?: string): void;
  /** Shows the last figures and ends the bar. Call once. */
  stop(): void;
}

const plainEveryMs = 5000;

/** The detail while no worker has started what is followed: perhaps none runs. */
export const waitingForWorker = (what: 'it' | 'them') =>
  `waiting for a worker to start ${what} (is perks-worker work running?)`;

export function createProgress(label: string, stream = process.stderr): Progress {
  return stream.isTTY ? barProgress(label, stream) : plainProgress(label, stream);
}

function barProgress(label: string, stream: NodeJS.WriteStream): Progress {
  const started = Date.now();
  const bar = new SingleBar({
    format: `${label} [{bar}] {percentage}% | {value}/{total} | {rate}/s | ETA {eta_formatted} | {detail}`,
    stream,
    hideCursor: true,
    etaBuffer: 50,
    fps: 5,
  });
  // Started at the first figures: a bar of 0 of 0 would be drawn full.
  let drawn = false;
  return {
    update(done, total, detail = '') {
      const payload = { rate: rateOf(done, started), detail };
      if (!drawn) bar.start(total, done, payload);
      else {
        bar.setTotal(total);
        bar.update(done, payload);
      }
      drawn = true;
    },
    stop: () => {
      if (drawn) bar.stop();
    },
  };
}

function plainProgress(label: string, stream: NodeJS.WritableStream): Progress {
  const started = Date.now();
  let last = { done: 0, total: 0, detail: '' };
  let writtenAt = started;
  let writtenKey = '';
  const write = () => {
    const { done, total, detail } = last;
    // The same figures again within the interval (a final stop just after a line): nothing new.
    const key = `${done}/${total};${detail}`;
    if (key === writtenKey && Date.now() - writtenAt < plainEveryMs) return;
    writtenKey = key;
    const rate = rateOf(done, started);
    const percent = total > 0 ? ` (${Math.floor((100 * done) / total)}%)` : '';
    const eta = rate > 0 && total > done ? `, ETA ${Math.ceil((total - done) / rate)} s` : '';
    const elapsed = ((Date.now() - started) / 1000).toFixed(1);
    stream.write(
      `${label}: ${done}/${total}${percent}, ${rate}/s${eta}, ${elapsed} s${detail ? `; ${detail}` : ''}\n`,
    );
    writtenAt = Date.now();
  };
  return {
    update(done, total, detail = '') {
      last = { done, total, detail };
      if (Date.now() - writtenAt >= plainEveryMs) write();
    },
    // Nothing done, nothing to report: the command's own line says why.
    stop: () => {
      if (last.done > 0) write();
    },
  };
}

const rateOf = (done: number, since: number): number =>
  Math.round(done / Math.max((Date.now() - since) / 1000, 0.001));
