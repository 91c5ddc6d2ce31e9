/** Logs the first error of an outage, then stays quiet until `recovered()` is called. */
export function oncePerOutage(log: (error: Error) => void): {
  error: (error: Error) => void;
  recovered: () => void;
} {
  let down = false;
  return {
    error(error) {
      if (down) return;
      down = true;
      log(error);
    },
    recovered() {
      down = false;
    },
  };
}
