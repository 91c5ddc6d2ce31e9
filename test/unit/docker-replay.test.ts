/** The Dockerfile replay of test/e2e/docker-image.test.ts fails where `docker build` would. */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { hostPath, replayDockerfile } from '../support/docker-replay.js';
import { dockerIgnore, parseDockerfile } from '../support/dockerfile.js';

const scratch = mkdtempSync(join(tmpdir(), 'perks-replay-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A build context with these files, replayed into a workspace of its own. */
async function replay(files: Record<string, string>) {
  const dir = mkdtempSync(join(scratch, 'case-'));
  const context = join(dir, 'context');
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(context, path, '..'), { recursive: true });
    writeFileSync(join(context, path), text);
  }
  const workspace = join(dir, 'workspace');
  mkdirSync(workspace);
  return replayDockerfile({ context, workspace, npmCache: join(dir, 'npm-cache') });
}

describe('parseDockerfile', () => {
  it('joins continued lines, drops comments and reads flags', () => {
    const [from, copy, health] = parseDockerfile(
      '# syntax=docker/dockerfile:1\nFROM node:22 AS build\n\nCOPY --from=build /app/dist ./dist\nHEALTHCHECK --interval=5s \\\n  # a comment inside\n  CMD ["node", "-e", "1"]\n',
    );
    expect(from).toMatchObject({ keyword: 'FROM', args: 'node:22 AS build', line: 2 });
    expect(copy).toMatchObject({ flags: { from: 'build' }, args: '/app/dist ./dist' });
    expect(health).toMatchObject({ flags: { interval: '5s' }, args: 'CMD ["node", "-e", "1"]' });
  });

  it('refuses an instruction it cannot replay', () => {
    expect(() => parseDockerfile('FROM a\nONBUILD RUN true\n')).toThrow(/ONBUILD is not replayed/);
    expect(() => parseDockerfile('FROM a\nWORKDIR $HOME\n')).toThrow(/\$variable is not replayed/);
  });
});

describe('dockerIgnore', () => {
  const { ignores } = dockerIgnore('node_modules\n/dist/\n*.log\n!keep.log\n**/*.tmp\n');
  it.each([
    ['node_modules/bullmq/package.json', true],
    ['dist/src/index.js', true],
    ['src/dist/index.ts', false],
    ['debug.log', true],
    ['keep.log', false],
    ['logs/debug.log', false],
    ['src/a/b.tmp', true],
    ['src/index.ts', false],
  ])('%s ignored: %s', (path, expected) => {
    expect(ignores(path)).toBe(expected);
  });
});

describe('replayDockerfile', () => {
  it('copies from the context and from an earlier stage, and runs RUN in WORKDIR', async () => {
    const stages = await replay({
      Dockerfile:
        'FROM base AS build\nWORKDIR /app\nCOPY src ./src\nRUN cat src/*.txt > out.txt\nFROM base\nWORKDIR /srv\nCOPY --from=build /app/out.txt ./\nENV GREETING="hello there"\nUSER node\n',
      '.dockerignore': 'src/b.txt\n',
      'src/a.txt': 'a\n',
      'src/b.txt': 'b\n',
    });
    const image = stages[1];
    // src/b.txt never reached the build: .dockerignore left it out of the context.
    expect(image && readFileSync(hostPath(image, 'out.txt'), 'utf8')).toBe('a\n');
    expect(image).toMatchObject({
      workdir: '/srv',
      user: 'node',
      env: { GREETING: 'hello there' },
    });
  });

  it('fails when a COPY source is missing, from the context or a stage', async () => {
    await expect(replay({ Dockerfile: 'FROM base\nCOPY bench ./bench\n' })).rejects.toThrow(
      /Dockerfile:2: COPY bench \.\/bench\nCOPY: bench: no such file or directory/,
    );
    await expect(
      replay({
        Dockerfile: 'FROM base\nCOPY .env ./\n',
        '.dockerignore': '.env\n',
        '.env': 'A=1\n',
      }),
    ).rejects.toThrow(/COPY: \.env: no such file or directory/);
    await expect(
      replay({ Dockerfile: 'FROM base AS build\nFROM base\nCOPY --from=build /app/dist ./dist\n' }),
    ).rejects.toThrow(/COPY: \/app\/dist: no such file or directory/);
  });

  it('fails when a RUN exits non-zero', async () => {
    await expect(
      replay({ Dockerfile: 'FROM base\nRUN echo broken >&2; exit 3\n' }),
    ).rejects.toThrow(/Dockerfile:2: RUN echo broken >&2; exit 3\nexit 3\nbroken/);
  });
});
