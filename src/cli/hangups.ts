/**
 * `work` reads a SIGHUP as a credentials rotation, not a hang-up. A SIGHUP with no listener
 * ends a Node process, so `work` listens from its first module (index.ts imports this one
 * before the command line and the worker's modules load) and holds one taken during the start
 * until the runtime is up. Other commands keep SIGHUP's default: a closed terminal ends them.
 */
let listening = false;
let taken = false;
let handler: (() => void) | undefined;

function listen(): void {
  if (listening) return;
  listening = true;
  process.on('SIGHUP', () => {
    if (handler) handler();
    else taken = true;
  });
}

/** From now on each SIGHUP calls `read`; one taken before is read at once. */
export function onHangup(read: () => void): void {
  listen();
  handler = read;
  if (taken) {
    taken = false;
    read();
  }
}

if (process.argv[2] === 'work') listen();
