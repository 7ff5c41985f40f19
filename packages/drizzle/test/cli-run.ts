/**
 * Runs the `idem` bin as a user's shell does: `node packages/drizzle/bin/idem.js …` (the file npm
 * links as `node_modules/.bin/idem`), as a child process, with the environment and working
 * directory given.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';

export const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
export const BIN = fileURLToPath(new URL('../bin/idem.js', import.meta.url));

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  /** The working directory (where `drizzle.config.ts` is looked for). Defaults to the repository root. */
  cwd?: string;
  /** Variables added to the environment, after DATABASE_URL and IDEM_TABLE_PREFIX are removed from it. */
  env?: Record<string, string>;
}

/** Runs `idem <args…>` with DATABASE_URL set to `databaseUrl` (unset when undefined). */
export function idemCli(
  args: string[],
  databaseUrl: string | undefined,
  { cwd = ROOT, env: extra = {} }: RunOptions = {},
): Promise<Run> {
  const env = { ...process.env };
  delete env.DATABASE_URL;
  delete env.IDEM_TABLE_PREFIX;
  if (databaseUrl !== undefined) env.DATABASE_URL = databaseUrl;
  Object.assign(env, extra);
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { cwd, env, timeout: 60_000 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Exit status, and exactly one `idem: …` line on stderr with no stack frames. */
export function expectOneLineError(run: Run, code: 1 | 2, reason: RegExp): void {
  expect(run.code, run.stderr).toBe(code);
  expect(run.stdout).toBe('');
  expect(run.stderr).not.toMatch(/^\s+at /m);
  expect(run.stderr.endsWith('\n')).toBe(true);
  const lines = run.stderr.slice(0, -1).split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^idem: /);
  expect(lines[0]).toMatch(reason);
}
