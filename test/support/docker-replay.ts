/**
 * Replays a Dockerfile without a Docker engine: each stage gets a directory standing for its
 * `/`, COPY takes what .dockerignore lets in from the build context (or from an earlier stage
 * with `--from`), and RUN runs with `sh -c` in the directory standing for the stage's WORKDIR.
 * A step fails as it would in `docker build`: a RUN that exits non-zero, a COPY source missing.
 *
 * What the replay cannot be: the base image (the host's node and npm stand for it) and USER
 * (every RUN runs as the host user; USER is recorded for the assertions).
 */
import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import {
  commandOf,
  contextFiles,
  copyArguments,
  dockerIgnore,
  envArguments,
  globRegExp,
  type Instruction,
  mountOptions,
  parseDockerfile,
} from './dockerfile.js';

export interface ReplayOptions {
  /** The build context (`docker build <context>`), holding the Dockerfile and .dockerignore. */
  context: string;
  /** An empty directory: one subdirectory per stage, standing for its `/`. */
  workspace: string;
  /** The host's npm cache, standing for `RUN --mount=type=cache,target=/root/.npm`. */
  npmCache: string;
  /** Told each step before it runs. */
  onStep?: (step: string) => void;
}

export interface Stage {
  name: string;
  /** The host directory standing for the stage's `/`. */
  root: string;
  workdir: string;
  env: Record<string, string>;
  user: string;
  /** The HEALTHCHECK's command (argv), if any. */
  healthcheck?: string[];
  entrypoint: string[];
  cmd: string[];
}

/** The host path standing for `path` (absolute, or relative to the WORKDIR) in a stage. */
export function hostPath(stage: Stage, path = stage.workdir): string {
  return join(stage.root, posix.resolve(stage.workdir, path));
}

/** Replays every instruction; returns the stages in order, the image being the last. */
export async function replayDockerfile(options: ReplayOptions): Promise<Stage[]> {
  const instructions = parseDockerfile(readFileSync(join(options.context, 'Dockerfile'), 'utf8'));
  const ignorePath = join(options.context, '.dockerignore');
  const ignore = dockerIgnore(existsSync(ignorePath) ? readFileSync(ignorePath, 'utf8') : '');
  const files = contextFiles(options.context, ignore);
  const stages: Stage[] = [];
  for (const instruction of instructions) {
    const flags = Object.entries(instruction.flags).map(([name, value]) => `--${name}=${value} `);
    const step = `Dockerfile:${instruction.line}: ${instruction.keyword} ${flags.join('')}${instruction.args}`;
    options.onStep?.(step);
    try {
      if (instruction.keyword === 'FROM') {
        stages.push(fromStep(instruction, stages, options.workspace));
        continue;
      }
      const stage = stages.at(-1);
      if (!stage) throw new Error('no FROM before it');
      await applyStep(stage, instruction, { ...options, files, stages });
    } catch (error) {
      throw new Error(`${step}\n${(error as Error).message}`);
    }
  }
  return stages;
}

function fromStep(instruction: Instruction, stages: Stage[], workspace: string): Stage {
  const [image = '', as, name] = instruction.args.split(/\s+/);
  const stageName = as?.toUpperCase() === 'AS' && name ? name : String(stages.length);
  const root = join(workspace, `${stages.length}-${stageName}`);
  const parent = stages.find((stage) => stage.name === image);
  if (parent) {
    cpSync(parent.root, root, { recursive: true, verbatimSymlinks: true });
    return { ...parent, name: stageName, root, env: { ...parent.env } };
  }
  mkdirSync(root, { recursive: true });
  return { name: stageName, root, workdir: '/', env: {}, user: 'root', entrypoint: [], cmd: [] };
}

interface StepContext extends ReplayOptions {
  files: string[];
  stages: Stage[];
}

async function applyStep(stage: Stage, instruction: Instruction, context: StepContext) {
  const { keyword, args, flags } = instruction;
  switch (keyword) {
    case 'WORKDIR':
      stage.workdir = posix.resolve(stage.workdir, args);
      mkdirSync(hostPath(stage), { recursive: true });
      return;
    case 'ENV':
      Object.assign(stage.env, envArguments(args));
      return;
    case 'USER':
      stage.user = args;
      return;
    case 'ENTRYPOINT':
      stage.entrypoint = commandOf(args);
      return;
    case 'CMD':
      stage.cmd = commandOf(args);
      return;
    case 'HEALTHCHECK':
      if (args === 'NONE') delete stage.healthcheck;
      else if (args.startsWith('CMD ')) stage.healthcheck = commandOf(args.slice(4).trim());
      else throw new Error('HEALTHCHECK takes CMD or NONE');
      return;
    case 'EXPOSE':
    case 'LABEL':
      return;
    case 'COPY':
      copyStep(stage, instruction, context);
      return;
    case 'RUN':
      await run(stage, commandOf(args), runEnv(flags, context.npmCache));
      return;
    default:
      throw new Error(`${keyword} is not replayed`);
  }
}

/** The one RUN flag replayed: npm's cache as a cache mount, standing for the host's cache. */
function runEnv(flags: Record<string, string>, npmCache: string): Record<string, string> {
  const { mount, ...others } = flags;
  if (Object.keys(others).length > 0)
    throw new Error(`RUN --${Object.keys(others)[0]} is not replayed`);
  if (mount === undefined) return {};
  const { type, target } = mountOptions(mount);
  if (type !== 'cache' || target !== '/root/.npm')
    throw new Error(`RUN --mount=${mount} is not replayed`);
  return { npm_config_cache: npmCache, npm_config_prefer_offline: 'true' };
}

function run(stage: Stage, argv: string[], extraEnv: Record<string, string>): Promise<void> {
  const [file = '', ...args] = argv;
  const child = spawn(file, args, {
    cwd: hostPath(stage),
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...stage.env, ...extraEnv },
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 300_000,
  });
  let output = '';
  const append = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-4000);
  };
  child.stdout.on('data', append);
  child.stderr.on('data', append);
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) =>
      code === 0 ? resolve() : reject(new Error(`exit ${code ?? signal}\n${output}`)),
    );
  });
}

export interface Ran {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command in the image: in its WORKDIR, with its ENV. */
export function runInStage(
  stage: Stage,
  argv: string[],
  env: Record<string, string> = {},
): Promise<Ran> {
  const [file = '', ...args] = argv;
  const child = spawn(file, args, {
    cwd: hostPath(stage),
    env: { PATH: process.env.PATH ?? '', ...stage.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 30_000,
  });
  const ran: Ran = { status: null, stdout: '', stderr: '' };
  child.stdout.on('data', (chunk: Buffer) => {
    ran.stdout += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    ran.stderr += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve({ ...ran, status: code }));
  });
}

/** A file to copy: where it is on the host, and its path under the destination. */
interface Source {
  from: string;
  to: string;
}

function copyStep(stage: Stage, instruction: Instruction, context: StepContext) {
  const { sources, destination } = copyArguments(instruction.args);
  const fromStage = instruction.flags.from;
  const found = sources.map((source) => {
    const matches =
      fromStage === undefined
        ? contextSources(context.context, context.files, source)
        : stageSources(context.stages, fromStage, source);
    if (matches.length === 0) throw new Error(`COPY: ${source}: no such file or directory`);
    return matches;
  });
  const toDirectory =
    destination.endsWith('/') || found.length > 1 || found.some((matches) => matches.length > 1);
  const target = hostPath(stage, destination);
  for (const { from, to } of found.flat()) {
    const path =
      to === '' && !toDirectory && !isDirectory(target)
        ? target
        : join(target, to || baseName(from));
    mkdirSync(dirname(path), { recursive: true });
    cpSync(from, path, { recursive: true, verbatimSymlinks: true });
  }
}

/** `src` is the files under src; `package*.json` the files it matches; `.` everything. */
function contextSources(root: string, files: string[], source: string): Source[] {
  const path = posix.normalize(source).replace(/^\/+/, '').replace(/\/+$/, '');
  if (path === '.' || path === '')
    return files.map((file) => ({ from: join(root, file), to: file }));
  if (/[*?[]/.test(path)) {
    // A glob matches files and directories at its own depth; a directory brings its files.
    const pattern = globRegExp(path);
    const depth = path.split('/').length;
    return files.flatMap((file) => {
      const prefix = file.split('/').slice(0, depth).join('/');
      if (!pattern.test(prefix)) return [];
      return [{ from: join(root, file), to: prefix === file ? '' : file.slice(prefix.length + 1) }];
    });
  }
  if (files.includes(path)) return [{ from: join(root, path), to: '' }];
  const under = files.filter((file) => file.startsWith(`${path}/`));
  return under.map((file) => ({ from: join(root, file), to: file.slice(path.length + 1) }));
}

/** `--from=<stage> /app/dist`: a file or a whole directory of an earlier stage. */
function stageSources(stages: Stage[], name: string, source: string): Source[] {
  const stage = stages.find((candidate) => candidate.name === name);
  if (!stage) throw new Error(`COPY --from=${name}: no such stage`);
  const from = join(stage.root, posix.resolve('/', source));
  if (!existsSync(from)) return [];
  return [{ from, to: isDirectory(from) ? '.' : '' }];
}

const isDirectory = (path: string) => existsSync(path) && statSync(path).isDirectory();
const baseName = (path: string) => path.split(/[\\/]/).at(-1) ?? '';
