/**
 * The commands README.md prints are true, as far as this machine can check them without a
 * registry:
 *
 * - every `npm …` names a script the root package.json has (`npm ci`, `npm install` aside; the
 *   `@idem/*` packages an `npm install` names exist in the workspace);
 * - every `npx idem …` names a command and flags the CLI has (`idem help <command>` lists them);
 * - the example's curl pair: `npm start` serves the example, and each `curl` answers the status
 *   (and `Idempotent-Replayed`) its comment promises;
 * - the quick start's `$ curl` transcript: the README's Hono quick start, run as written on a free
 *   port, answers each curl with the status line and the `idempotent-replayed` header printed.
 *
 * A command with any other program fails the test: add it here, with how to check it.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import MarkdownIt from 'markdown-it';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');
const BIN = join(ROOT, 'packages/drizzle/bin/idem.js');

interface Command {
  /** The command as printed, continuation lines joined, without its comment. */
  text: string;
  /** The shell comment after it (`# 200, executed`), or ''. */
  comment: string;
  /** For a `$ ` line of a console block: the output printed under it. */
  output?: string;
}

/** The commands of the README's `sh` and `console` blocks. */
function readmeCommands(): { sh: Command[]; console: Command[] } {
  const sh: Command[] = [];
  const transcript: Command[] = [];
  for (const token of new MarkdownIt().parse(README, {})) {
    if (token.type !== 'fence') continue;
    const lang = token.info.trim();
    const lines = token.content.replace(/\\\n\s*/g, '').split('\n');
    if (lang === 'sh') {
      for (const line of lines) {
        if (line.trim() === '' || line.trim().startsWith('#')) continue;
        const [, text = '', comment = ''] = /^(.*?)(?:\s+#\s+(.*))?$/.exec(line) ?? [];
        for (const part of text.split('&&')) sh.push({ text: part.trim(), comment });
      }
    } else if (lang === 'console') {
      let current: Command | undefined;
      for (const line of lines) {
        if (line.startsWith('$ ')) {
          current = { text: line.slice(2).trim(), comment: '', output: '' };
          transcript.push(current);
        } else if (current) current.output += `${line}\n`;
      }
    }
  }
  return { sh, console: transcript };
}

const { sh, console: transcript } = readmeCommands();
const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> })
  .scripts;
const workspacePackages = ['core', 'drizzle', 'trpc', 'envelop', 'fetch'].map((name) => `@idem/${name}`);

function run(file: string, args: string[], options: { env?: NodeJS.ProcessEnv } = {}) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(file, args, { cwd: ROOT, timeout: 60_000, env: options.env }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr });
    });
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Words of a printed command, as the shell splits them (single and double quotes). */
function words(text: string): string[] {
  return [...text.matchAll(/'([^']*)'|"((?:[^"\\]|\\.)*)"|(\S+)/g)].map(
    (match) => match[1] ?? match[2]?.replace(/\\(.)/g, '$1') ?? match[3]!,
  );
}

/** Runs a printed curl command against `port` in place of the printed one; `-i` output. */
async function curl(text: string, printedPort: number, port: number) {
  const args = words(text)
    .slice(1)
    .map((word) => word.replace(`localhost:${printedPort}`, `127.0.0.1:${port}`));
  const result = await run('curl', ['-sS', '--max-time', '30', ...args]);
  expect(result.code, `${text}\n${result.stderr}`).toBe(0);
  const [statusLine = ''] = result.stdout.split('\r\n');
  const headers = result.stdout.split('\r\n\r\n')[0]!.toLowerCase();
  return { status: Number(statusLine.split(' ')[1]), statusLine, headers };
}

async function waitFor(url: string, child: ChildProcess, log: () => string): Promise<void> {
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the server exited (${child.exitCode}):\n${log()}`);
    try {
      await fetch(url);
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

const children: ChildProcess[] = [];
const folders: string[] = [];
afterAll(() => {
  for (const child of children) if (child.exitCode === null) child.kill();
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

/** Starts `command` with `env`, its output kept; resolves once `url` answers. */
async function serve(command: string, args: string[], env: NodeJS.ProcessEnv, url: string) {
  let output = '';
  // detached: `npm start` runs tsx under npm; the whole group is ended at the end.
  const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, ...env }, detached: true });
  children.push(child);
  child.stdout?.on('data', (chunk: Buffer) => void (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => void (output += chunk.toString()));
  await waitFor(url, child, () => output);
  return {
    stop() {
      if (child.pid !== undefined && child.exitCode === null) process.kill(-child.pid, 'SIGTERM');
    },
  };
}

describe('README commands', () => {
  it('the README prints the two commands of a fresh clone in its first screen', () => {
    const firstScreen = README.split('\n').slice(0, 40).join('\n');
    expect(firstScreen).toContain('npm ci && npm start');
    expect(firstScreen).toContain('npm test');
  });

  it('every command is one this test knows how to check', () => {
    const unknown = [...sh, ...transcript]
      .map((command) => command.text)
      .filter((text) => !/^(npm|npx idem|curl) /.test(`${text} `));
    expect(unknown).toEqual([]);
  });

  it('every npm command names a script of the root package.json, or @idem packages of the workspace', () => {
    for (const { text } of sh.filter((command) => command.text.startsWith('npm '))) {
      const [, verb, ...rest] = words(text);
      if (verb === 'ci') continue;
      if (verb === 'install' || verb === 'i') {
        for (const name of rest.filter((word) => word.startsWith('@idem/'))) expect(workspacePackages).toContain(name);
        continue;
      }
      const script = verb === 'run' ? rest[0] : verb;
      expect(Object.keys(scripts), text).toContain(script);
    }
    // The quick start's install line is prose: check its @idem names too.
    for (const [name] of README.matchAll(/@idem\/[a-z]+(?=[\s`/])/g)) expect(workspacePackages).toContain(name);
  });

  it('every npx idem command names a command and flags the CLI has', async () => {
    const commands = sh.filter((command) => command.text.startsWith('npx idem'));
    expect(commands.length).toBeGreaterThan(0);
    for (const { text } of commands) {
      const [, , command, ...args] = words(text);
      const help = await run(process.execPath, command === '--help' ? [BIN, '--help'] : [BIN, 'help', command!]);
      expect(help.code, `${text}: ${help.stderr}`).toBe(0);
      for (const flag of args.filter((arg) => arg.startsWith('--'))) expect(help.stdout, text).toContain(flag);
    }
  });

  it("npm start serves the example, and each of the README's curl commands answers as its comment says", async () => {
    const curls = sh.filter((command) => command.text.startsWith('curl '));
    expect(curls.length).toBeGreaterThanOrEqual(2);
    const folder = mkdtempSync(join(tmpdir(), 'idem-readme-'));
    folders.push(folder);
    const port = await freePort();
    const example = await serve(
      'npm',
      ['start'],
      { PORT: String(port), DATABASE_URL: `file:${join(folder, 'example.db')}` },
      `http://127.0.0.1:${port}/healthz`,
    );
    try {
      for (const { text, comment } of curls) {
        const answer = await curl(text, 3000, port);
        const [promised] = /\b\d{3}\b/.exec(comment) ?? [];
        expect(String(answer.status), `${text} # ${comment}`).toBe(promised);
        if (/Idempotent-Replayed: true/i.test(comment)) expect(answer.headers).toContain('idempotent-replayed: true');
        else expect(answer.headers).not.toContain('idempotent-replayed');
      }
    } finally {
      example.stop();
    }
  }, 180_000);

  it('the quick start, run as printed, answers its $ curl transcript: status lines and the replay header', async () => {
    const quickStart = /## Quick start\n[\s\S]*?```ts\n([\s\S]*?)```/.exec(README)?.[1];
    expect(quickStart).toBeDefined();
    mkdirSync(join(ROOT, '.scratch'), { recursive: true }); // gitignored: absent in a fresh clone
    const folder = mkdtempSync(join(ROOT, '.scratch', 'readme-quick-start-'));
    folders.push(folder);
    const port = await freePort();
    const source = quickStart!
      .replace("new Database('idem.db'", `new Database(${JSON.stringify(join(folder, 'idem.db'))}`)
      .replace('port: 5000', `port: ${port}`);
    expect(source).toContain(`port: ${port}`);
    mkdirSync(folder, { recursive: true });
    writeFileSync(join(folder, 'quick-start.ts'), source);
    const server = await serve(
      process.execPath,
      ['--import', 'tsx', join(folder, 'quick-start.ts')],
      {},
      `http://127.0.0.1:${port}/`,
    );
    try {
      expect(transcript.length).toBeGreaterThanOrEqual(2);
      for (const { text, output = '' } of transcript) {
        const answer = await curl(text, 5000, port);
        const printed = output.split('\n');
        expect(answer.statusLine, text).toBe(printed[0]);
        const replayed = printed.some((line) => /^idempotent-replayed: true$/i.test(line));
        expect(answer.headers.includes('idempotent-replayed: true'), text).toBe(replayed);
      }
    } finally {
      server.stop();
    }
  }, 180_000);
});
