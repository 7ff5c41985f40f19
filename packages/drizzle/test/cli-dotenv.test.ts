/**
 * The CLI finds the database where the app keeps it: `DATABASE_URL` in the environment, else in
 * the `.env` of the folder it runs in (create-t3-app writes it there, as `postgresql://…`, and
 * drizzle-kit reads it through the config). The environment wins over the file, as with dotenv.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../src/cli/index.ts';

const folders: string[] = [];
afterEach(() => {
  for (const folder of folders.splice(0)) rmSync(folder, { recursive: true, force: true });
});

/** A folder with `.env` holding `text`. */
function appFolder(text: string): string {
  const folder = mkdtempSync(join(tmpdir(), 'idem-dotenv-'));
  folders.push(folder);
  writeFileSync(join(folder, '.env'), text);
  return folder;
}

async function cli(argv: string[], cwd: string, env: Record<string, string> = {}) {
  let stdout = '';
  let stderr = '';
  const code = await runCli(argv, {
    stdout: (text) => void (stdout += text),
    stderr: (text) => void (stderr += text),
    env,
    cwd,
  });
  return { code, stdout, stderr };
}

describe('idem reads DATABASE_URL from .env', () => {
  it('opens the database .env names when the environment names none', async () => {
    const folder = appFolder('# t3 writes comments too\nDATABASE_URL="file:./from-dotenv.db"\nOTHER=1\n');
    const run = await cli(['migrate'], folder);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('from-dotenv.db');
  });

  it('the environment wins over .env', async () => {
    const folder = appFolder('DATABASE_URL="file:./from-dotenv.db"\n');
    const run = await cli(['migrate'], folder, { DATABASE_URL: `file:${join(folder, 'from-env.db')}` });
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('from-env.db');
    expect(run.stdout).not.toContain('from-dotenv.db');
  });

  it("takes t3's postgresql:// from .env as PostgreSQL (an unreachable one: exit 1 naming it, not a usage error)", async () => {
    const folder = appFolder('DATABASE_URL="postgresql://postgres:s3cret@127.0.0.1:1/t3app"\n');
    const run = await cli(['stats'], folder);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^idem: cannot reach postgresql:\/\/postgres:\*\*\*@127\.0\.0\.1:1\/t3app: /);
    expect(run.stderr).not.toContain('s3cret');
  });

  it('without DATABASE_URL anywhere, says where it looked and that postgresql:// is fine', async () => {
    const folder = appFolder('OTHER=1\n');
    const run = await cli(['stats'], folder);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('.env');
    expect(run.stderr).toContain('postgresql://');
  });
});
