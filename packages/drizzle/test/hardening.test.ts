/**
 * Hardening (issue 14): defects an adversarial black-box pass found in @idem/drizzle, on SQLite
 * and PostgreSQL where both apply. Each test failed before its fix.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../src/cli.ts';
import { createDrizzleStore, migrate, type DrizzleDatabase } from '../src/index.ts';
import { isServerReachable, openPostgresTarget, postgresRequired } from './pg-target.ts';
import { claimed } from './store-behaviour.ts';
import { openSqliteTarget } from './sqlite-target.ts';

/** A database both this process and the CLI (given `--database url`) can open. */
interface SharedDatabase {
  db: DrizzleDatabase;
  url: string;
  close(): Promise<void>;
}

async function sqliteDatabase(): Promise<SharedDatabase> {
  const target = await openSqliteTarget();
  return { db: target.db, url: `file:${target.file}`, close: () => target.close() };
}

async function postgresDatabase(): Promise<SharedDatabase> {
  const target = await openPostgresTarget({ max: 4, schemaPrefix: 'idem_hardening' });
  if (!target.url) throw new Error('unreachable: the PostgreSQL half is skipped when only PGlite is available');
  return { db: target.db, url: target.url, close: () => target.close() };
}

// The CLI opens its own connection: PGlite (in-process) cannot be shared with it.
const postgresServer = (await isServerReachable()) || postgresRequired();

async function cli(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(argv, { stdout: (text) => void (stdout += text), stderr: (text) => void (stderr += text), env: {} });
  return { code, stdout, stderr };
}

describe.each([
  { database: 'SQLite', open: sqliteDatabase, skip: false },
  { database: 'PostgreSQL', open: postgresDatabase, skip: !postgresServer },
])('idem explain on $database (issue 14, item 13)', ({ open, skip }) => {
  let shared: SharedDatabase;
  beforeAll(async () => {
    if (skip) return;
    shared = await open();
    await migrate(shared.db);
  });
  afterAll(async () => {
    await shared?.close();
  });

  it.skipIf(skip)('A1/K1: finds a key pasted in its header form ("…") as well as bare, with the same timeline', async () => {
    const store = createDrizzleStore(shared.db);
    const key = `order-${randomUUID()}`;
    const token = randomUUID();
    claimed(await store.claim({ scope: 'public/payments.create', key, fingerprint: 'f', token, leaseMs: 30_000, retentionMs: 60_000, expiredReuse: 'execute' }));
    await store.complete({ scope: 'public/payments.create', key, token, outcome: { kind: 'success', status: 200, body: '{}' } });

    const bare = await cli(['explain', key, '--json', '--database', shared.url]);
    expect(bare.stderr).toBe('');
    expect(bare.code).toBe(0);
    const quoted = await cli(['explain', `"${key}"`, '--json', '--database', shared.url]);
    expect(quoted.stderr).toBe('');
    expect(quoted.code).toBe(0);
    expect(quoted.stdout).toBe(bare.stdout);
    expect(JSON.parse(quoted.stdout)).toMatchObject({ key, scopes: [{ scope: 'public/payments.create', generations: [{ generation: 1, status: 200 }] }] });
  });

  it.skipIf(skip)('K3: a pasted value that is no key is refused as bad usage (exit 2), with one line saying why', async () => {
    const run = await cli(['explain', '"unterminated', '--database', shared.url]);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/^idem: "\\"unterminated" is not an Idempotency-Key: .*\n$/);
  });
});
