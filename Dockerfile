# syntax=docker/dockerfile:1
# test/e2e/docker-image.test.ts replays this file without a Docker engine: keep to FROM, WORKDIR,
# COPY, RUN (with an npm cache mount at most), ENV, USER, EXPOSE, HEALTHCHECK, ENTRYPOINT, CMD.
FROM node:22-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` would build before the sources are here; the build is below.
RUN --mount=type=cache,target=/root/.npm npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY src ./src
RUN npm run build

FROM node:22-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
# No TypeScript here, so no `prepare`; the cache mount keeps npm's cache out of the image.
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --ignore-scripts --no-audit --no-fund
COPY --from=build /app/dist/src ./dist/src
USER node
EXPOSE 9464
# The operations server of `work` (PORT); a one-off command (`enroll`, `migrate`) exits first.
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch(`http://127.0.0.1:${process.env.PORT || 9464}/healthz`).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "dist/src/index.js"]
CMD ["work"]
