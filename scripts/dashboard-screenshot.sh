#!/usr/bin/env bash
# Renders the queue dashboard of a running `perks-worker work` in headless Chromium and saves
# a screenshot: the check that bull-board really renders (its HTML, assets and API are also
# tested over HTTP, without a browser, in test/integration/ops/dashboard.test.ts).
#
#   DASHBOARD_PASSWORD=... scripts/dashboard-screenshot.sh [URL] [OUT.png]
#
# URL defaults to http://127.0.0.1:${PORT:-9464}/dashboard/queue/enrollment?status=failed
# (the failed enrollments), OUT to docs/dashboard.png. Needs Debian's `chromium` package
# (apt-get install -y chromium) and node.
#
# Headless Chromium cannot answer a basic-auth prompt, and credentials put in the URL are not
# sent with the page's own fetches (its translations, its API calls). So a small local proxy
# adds the Authorization header to every request; the password stays in the environment,
# never on a command line.
set -euo pipefail

: "${DASHBOARD_PASSWORD:?set DASHBOARD_PASSWORD to the worker dashboard password}"
export DASHBOARD_USER="${DASHBOARD_USER:-admin}" DASHBOARD_PASSWORD
target="${1:-http://127.0.0.1:${PORT:-9464}/dashboard/queue/enrollment?status=failed}"
out="${2:-docs/dashboard.png}"
browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then
  echo "dashboard-screenshot: chromium is not installed (apt-get install -y chromium)" >&2
  exit 3
fi

work="$(mktemp -d)"
proxy_pid=""
cleanup() {
  if [ -n "$proxy_pid" ]; then kill "$proxy_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

TARGET="$target" node --input-type=module -e '
import http from "node:http";
const target = new URL(process.env.TARGET);
const auth = "Basic " + Buffer.from(`${process.env.DASHBOARD_USER}:${process.env.DASHBOARD_PASSWORD}`).toString("base64");
const server = http.createServer((req, res) => {
  const upstream = http.request(
    { host: target.hostname, port: target.port || 80, path: req.url, method: req.method,
      headers: { ...req.headers, host: target.host, authorization: auth } },
    (answer) => { res.writeHead(answer.statusCode ?? 502, answer.headers); answer.pipe(res); },
  );
  upstream.on("error", () => { res.writeHead(502); res.end(); });
  req.pipe(upstream);
});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
' >"$work/port" &
proxy_pid=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
port="$(cat "$work/port")"
path="/${target#*://*/}"
rm -f "$out"

"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --hide-scrollbars --user-data-dir="$work/profile" --window-size=1280,800 \
  --virtual-time-budget=15000 --screenshot="$out" "http://127.0.0.1:${port}${path}" \
  >/dev/null 2>&1 || true

if [ ! -s "$out" ]; then
  echo "dashboard-screenshot: chromium wrote no screenshot" >&2
  exit 1
fi
echo "dashboard-screenshot: wrote $out ($(wc -c <"$out") bytes) of ${target}"
