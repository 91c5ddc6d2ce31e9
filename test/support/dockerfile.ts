/**
 * Reads a Dockerfile and a .dockerignore the way `docker build` does, for a replay without a
 * Docker engine (docker-replay.ts): instructions with their flags, and the build context's files.
 * An instruction the replay cannot honour is refused here rather than skipped.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';

export interface Instruction {
  keyword: string;
  /** `--name=value` flags before the arguments (`COPY --from=build`, `RUN --mount=...`). */
  flags: Record<string, string>;
  /** The rest of the line, continuations joined. */
  args: string;
  line: number;
}

const known = new Set([
  'FROM',
  'WORKDIR',
  'COPY',
  'RUN',
  'ENV',
  'USER',
  'EXPOSE',
  'HEALTHCHECK',
  'ENTRYPOINT',
  'CMD',
  'LABEL',
]);

/** Where Docker expands `$VAR`; RUN, CMD, ENTRYPOINT and HEALTHCHECK leave it to the shell. */
const substituting = new Set(['FROM', 'WORKDIR', 'COPY', 'ENV', 'USER', 'EXPOSE', 'LABEL']);

export function parseDockerfile(text: string): Instruction[] {
  const instructions: Instruction[] = [];
  let pending = '';
  let start = 0;
  text.split('\n').forEach((raw, index) => {
    const line = raw.replace(/\r$/, '');
    // Comments (parser directives included) may sit between continued lines too.
    if (/^\s*#/.test(line) || (pending === '' && line.trim() === '')) return;
    if (pending === '') start = index + 1;
    if (/\\\s*$/.test(line)) {
      pending += line.replace(/\\\s*$/, '');
      return;
    }
    instructions.push(instruction(pending + line, start));
    pending = '';
  });
  if (pending !== '') instructions.push(instruction(pending, start));
  return instructions;
}

function instruction(text: string, line: number): Instruction {
  const match = /^\s*(\w+)\s+(.*)$/s.exec(text);
  if (!match?.[1] || match[2] === undefined) throw new Error(`Dockerfile:${line}: cannot parse`);
  const keyword = match[1].toUpperCase();
  if (!known.has(keyword)) throw new Error(`Dockerfile:${line}: ${keyword} is not replayed`);
  let args = match[2].trim();
  if (substituting.has(keyword) && args.includes('$')) {
    throw new Error(`Dockerfile:${line}: ${keyword} with a $variable is not replayed`);
  }
  const flags: Record<string, string> = {};
  for (let flag = /^--([\w-]+)(?:=(\S*))?\s+/.exec(args); flag; ) {
    flags[flag[1] ?? ''] = flag[2] ?? 'true';
    args = args.slice(flag[0].length);
    flag = /^--([\w-]+)(?:=(\S*))?\s+/.exec(args);
  }
  return { keyword, flags, args, line };
}

/**
 * The exec form (`["node", "x.js"]`) as its argv, the shell form as `sh -c`. An argument that
 * starts with `[` but is not a JSON array of strings is a shell command to Docker; here it is a
 * mistake, refused.
 */
export function commandOf(args: string): string[] {
  if (!args.startsWith('[')) return ['/bin/sh', '-c', args];
  const parsed: unknown = JSON.parse(args);
  if (!Array.isArray(parsed) || !parsed.every((item) => typeof item === 'string')) {
    throw new Error(`not a JSON array of strings: ${args}`);
  }
  return parsed;
}

/** `COPY a b ./` or `COPY ["a", "b", "./"]`: the sources and the destination. */
export function copyArguments(args: string): { sources: string[]; destination: string } {
  const words = args.startsWith('[') ? commandOf(args) : args.split(/\s+/);
  const destination = words.pop();
  if (destination === undefined || words.length === 0) throw new Error(`COPY ${args}: too short`);
  return { sources: words, destination };
}

/** `ENV A=1 B="two words"`, or the legacy `ENV A 1`. */
export function envArguments(args: string): Record<string, string> {
  const legacy = /^([\w.-]+)\s+(.*)$/s.exec(args);
  if (legacy?.[1] && !legacy[1].includes('=')) return { [legacy[1]]: legacy[2] ?? '' };
  const env: Record<string, string> = {};
  for (const [, key, quoted, bare] of args.matchAll(/([\w.-]+)=(?:"([^"]*)"|(\S*))/g)) {
    if (key) env[key] = quoted ?? bare ?? '';
  }
  return env;
}

/** `--mount=type=cache,target=/root/.npm` as `{ type: 'cache', target: '/root/.npm' }`. */
export function mountOptions(flag: string): Record<string, string> {
  return Object.fromEntries(flag.split(',').map((pair) => pair.split('=', 2) as [string, string]));
}

/** A .dockerignore pattern (or a COPY source glob) as a regular expression over `/` paths. */
export function globRegExp(pattern: string): RegExp {
  let source = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern.charAt(i);
    if (c === '*' && pattern.charAt(i + 1) === '*') {
      const slash = pattern.charAt(i + 2) === '/';
      source += slash ? '(?:.*/)?' : '.*';
      i += slash ? 2 : 1;
    } else if (c === '*') source += '[^/]*';
    else if (c === '?') source += '[^/]';
    else if (c === '\\') source += escapeRegExp(pattern.charAt(++i));
    else if (c === '[') {
      const end = pattern.indexOf(']', i + 1);
      if (end < 0) throw new Error(`unclosed [ in ${pattern}`);
      source += `[${pattern.slice(i + 1, end).replace(/^!/, '^')}]`;
      i = end;
    } else source += escapeRegExp(c);
  }
  return new RegExp(`^${source}$`);
}

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

interface IgnoreRule {
  pattern: RegExp;
  /** A `!pattern`: lets back in what an earlier pattern left out. */
  exception: boolean;
}

export interface DockerIgnore {
  ignores(path: string): boolean;
  /** Some `!pattern` may let back in a file of a directory left out. */
  hasExceptions: boolean;
}

/**
 * .dockerignore semantics: patterns are relative to the context root (a leading `/` is
 * dropped), a pattern that matches a directory leaves out everything under it, and the last
 * matching pattern decides, so that `!keep.txt` after `*.txt` lets keep.txt back in.
 */
export function dockerIgnore(text: string): DockerIgnore {
  const rules: IgnoreRule[] = text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const exception = line.startsWith('!');
      const pattern = (exception ? line.slice(1) : line).trim().replace(/^\/+|\/+$/g, '');
      return { pattern: globRegExp(pattern.replace(/^\.\/+/, '')), exception };
    });
  return {
    hasExceptions: rules.some((rule) => rule.exception),
    ignores(path) {
      const prefixes = path.split('/').map((_, i, parts) => parts.slice(0, i + 1).join('/'));
      let ignored = false;
      for (const rule of rules) {
        if (prefixes.some((prefix) => rule.pattern.test(prefix))) ignored = !rule.exception;
      }
      return ignored;
    },
  };
}

/**
 * The files of the build context (`/`-separated, relative to `root`) that .dockerignore lets
 * in. A left-out directory is not walked unless an exception could let something in it back.
 */
export function contextFiles(root: string, ignore: DockerIgnore): string[] {
  const files: string[] = [];
  const walk = (relative: string) => {
    for (const entry of readdirSync(join(root, relative), { withFileTypes: true })) {
      const path = relative === '' ? entry.name : `${relative}/${entry.name}`;
      if (entry.isDirectory()) {
        if (!ignore.ignores(path) || ignore.hasExceptions) walk(path);
      } else if (!ignore.ignores(path)) {
        files.push(path);
      }
    }
  };
  walk('');
  return files.sort();
}
