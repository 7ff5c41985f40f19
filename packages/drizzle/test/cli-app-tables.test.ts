/**
 * The `idem` bin on the app's own tables: idem's tables created by drizzle-kit under a prefix
 * (create-t3-app's `tablesFilter: ["<app>_*"]`), on a SQLite file, a PostgreSQL schema (through
 * postgres-js, t3's driver) and a MySQL database. Every command finds them from `--prefix`, from
 * `IDEM_TABLE_PREFIX` or from the app's drizzle.config.ts; without any of these it says what it
 * looked for; and `idem migrate` refuses to make a second, unused pair of tables.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createDrizzleStore, type DrizzleDatabase } from '../src/index.ts';
import type { Dialect } from '../src/dialect.ts';
import { expectOneLineError, idemCli, type RunOptions } from './cli-run.ts';
import { createTablesWithDrizzleKit } from './drizzle-kit-tables.ts';
import { mysqlSuitesRun, openMysqlTarget } from './mysql-target.ts';
import { isServerReachable, openPostgresTarget, postgresRequired } from './pg-target.ts';
import { openSqliteConnection } from './sqlite-target.ts';

vi.setConfig({ testTimeout: 120_000 });

const PREFIX = 't3app_';

interface Target {
  dialect: Dialect;
  url: string;
  driver?: string;
  db: DrizzleDatabase;
  close(): Promise<void>;
}

async function sqliteTarget(): Promise<Target> {
  const directory = mkdtempSync(join(tmpdir(), 'idem-cli-tables-'));
  const file = join(directory, 'app.db');
  const { client, db } = openSqliteConnection(file);
  return {
    dialect: 'sqlite',
    url: `file:${file}`,
    db,
    async close() {
      client.close();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

async function postgresTarget(): Promise<Target> {
  const target = await openPostgresTarget({ max: 2, schemaPrefix: 'idem_cli_tables' });
  if (!target.url) throw new Error('unreachable: the PostgreSQL half needs a server');
  return { dialect: 'postgres', url: target.url, driver: 'postgres-js', db: target.db, close: () => target.close() };
}

async function mysqlTarget(): Promise<Target> {
  const target = await openMysqlTarget({ connectionLimit: 2, prefix: 'idem_cli_tables' });
  return { dialect: 'mysql', url: target.url, db: target.db, close: () => target.close() };
}

const postgresServer = (await isServerReachable()) || postgresRequired();
const mysqlServer = await mysqlSuitesRun();

const TARGETS = [
  { database: 'a SQLite file', open: sqliteTarget, skip: false },
  { database: 'a PostgreSQL schema through postgres-js', open: postgresTarget, skip: !postgresServer },
  { database: 'a MySQL database', open: mysqlTarget, skip: !mysqlServer },
];

const DEFINE = { sqlite: 'defineSqliteTables', postgres: 'definePgTables', mysql: 'defineMysqlTables' } as const;
const KIT_DIALECT = { sqlite: 'sqlite', postgres: 'postgresql', mysql: 'mysql' } as const;

describe.each(TARGETS)("idem on the app's own tables, under a prefix, in $database", ({ open, skip }) => {
  let target: Target;
  const key = `order-${randomUUID()}`;
  const scope = 'post.create|*';
  /** An app folder as create-t3-app makes it: drizzle.config.ts with tablesFilter, the schema it names. */
  let app: string;
  /** An app folder whose config has only the tablesFilter (the schema file does not define idem's tables). */
  let filterOnly: string;
  let elsewhere: string;
  const run = (args: string[], options: RunOptions = {}) =>
    idemCli(target.driver ? [...args, '--driver', target.driver] : args, target.url, { cwd: elsewhere, ...options });

  beforeAll(async () => {
    if (skip) return;
    target = await open();
    await createTablesWithDrizzleKit(target.db, target.dialect, { prefix: PREFIX });
    const store = createDrizzleStore(target.db, { tables: { prefix: PREFIX } });
    const token = randomUUID();
    const claim = await store.claim({
      scope,
      key,
      fingerprint: 'f1',
      token,
      leaseMs: 30_000,
      retentionMs: 3_600_000,
      expiredReuse: 'execute',
    });
    expect(claim.outcome).toBe('claimed');
    expect(await store.complete({ scope, key, token, outcome: { kind: 'success', status: 200, body: '{}' } })).toBe(
      true,
    );

    elsewhere = mkdtempSync(join(tmpdir(), 'idem-cli-nowhere-'));
    app = mkdtempSync(join(tmpdir(), 'idem-cli-app-'));
    mkdirSync(join(app, 'src/server/db'), { recursive: true });
    writeFileSync(
      join(app, 'drizzle.config.ts'),
      `import { type Config } from "drizzle-kit";

import { env } from "~/env";

export default {
  schema: "./src/server/db/schema.ts",
  dialect: "${KIT_DIALECT[target.dialect]}",
  dbCredentials: {
    url: env.DATABASE_URL,
  },
  tablesFilter: ["${PREFIX}*"],
} satisfies Config;
`,
    );
    writeFileSync(
      join(app, 'src/server/db/schema.ts'),
      `import { ${DEFINE[target.dialect]} } from '@idem/drizzle';\n\nexport const { keys: idemKeys, history: idemKeyHistory } = ${DEFINE[target.dialect]}({ prefix: '${PREFIX}' });\n`,
    );
    filterOnly = mkdtempSync(join(tmpdir(), 'idem-cli-filter-'));
    writeFileSync(
      join(filterOnly, 'drizzle.config.ts'),
      `export default { schema: './schema.ts', dialect: '${KIT_DIALECT[target.dialect]}', tablesFilter: ['${PREFIX}*'] };\n`,
    );
  });
  afterAll(async () => {
    for (const folder of [app, filterOnly, elsewhere]) if (folder) rmSync(folder, { recursive: true, force: true });
    await target?.close();
  });

  const explains = (result: { code: number; stdout: string; stderr: string }) => {
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`scope ${scope}, key "${key}": 1 generation`);
    expect(result.stdout).toMatch(/^1 +\S+ +\S+ +200 success /m);
  };

  it.skipIf(skip)(
    'without a prefix, a drizzle config or IDEM_TABLE_PREFIX, every command fails with exit 1 and names what it looked for and the flag',
    async () => {
      for (const args of [['explain', key], ['sweep'], ['purge', '--older-than', '90d'], ['policy']]) {
        expectOneLineError(
          await run(args),
          1,
          /has no idem tables: looked for idem_keys and idem_key_history \(the default names\); pass --prefix <prefix> \(or set IDEM_TABLE_PREFIX\) if your schema gives them another prefix, or run idem migrate to create the default ones$/,
        );
      }
    },
  );

  it.skipIf(skip)('--prefix and IDEM_TABLE_PREFIX name the tables for every command', async () => {
    explains(await run(['explain', key, '--prefix', PREFIX]));
    explains(await run(['explain', key], { env: { IDEM_TABLE_PREFIX: PREFIX } }));
    explains(
      await run(['explain', key, `--keys-table=${PREFIX}idem_keys`, `--history-table=${PREFIX}idem_key_history`]),
    );
    const sweep = await run(['sweep', '--prefix', PREFIX]);
    expect(sweep).toEqual({ code: 0, stdout: 'archived 0 expired records\n', stderr: '' });
    const purge = await run(['purge', '--older-than', '90d', '--prefix', PREFIX]);
    expect(purge).toEqual({ code: 0, stdout: 'deleted 0 archived records older than 90d\n', stderr: '' });
    const policy = await run(['policy', '--json'], { env: { IDEM_TABLE_PREFIX: PREFIX } });
    expect(policy.code, policy.stderr).toBe(0);
    expect(JSON.parse(policy.stdout).scopes).toMatchObject([{ scope, retentionMs: 3_600_000 }]);
    // The flag wins over the environment.
    expectOneLineError(
      await run(['explain', key, '--prefix', 'other_'], { env: { IDEM_TABLE_PREFIX: PREFIX } }),
      1,
      /looked for other_idem_keys and other_idem_key_history \(--prefix "other_"\); check the names/,
    );
  });

  it.skipIf(skip)(
    "in the app's folder, the tables come from drizzle.config.ts: its schema's definition, or its tablesFilter",
    async () => {
      explains(await run(['explain', key], { cwd: app }));
      explains(await run(['explain', key], { cwd: filterOnly }));
      explains(await run(['explain', key, '--config', join(app, 'drizzle.config.ts')]));
      const policy = await run(['policy'], { cwd: filterOnly });
      expect(policy.code, policy.stderr).toBe(0);
      expect(policy.stdout).toContain(scope);
      // A prefix that matches nothing in the database: the message lists every candidate.
      expectOneLineError(
        await run(['explain', key, '--config', join(filterOnly, 'drizzle.config.ts')], {
          env: { IDEM_TABLE_PREFIX: 'nope_' },
        }),
        1,
        /looked for nope_idem_keys and nope_idem_key_history \(IDEM_TABLE_PREFIX="nope_"\)/,
      );
    },
  );

  it.skipIf(skip)(
    'idem migrate refuses a prefix, and tables that the drizzle schema defines under other names: drizzle-kit creates those',
    async () => {
      expectOneLineError(
        await run(['migrate', '--prefix', PREFIX]),
        2,
        new RegExp(
          `^idem: idem migrate creates only idem_keys and idem_key_history; ${PREFIX}idem_keys and ${PREFIX}idem_key_history, named by --prefix "${PREFIX}", are created by your drizzle-kit migrations \\(drizzle-kit generate, then drizzle-kit migrate\\)$`,
        ),
      );
      expectOneLineError(
        await run(['migrate'], { cwd: app }),
        2,
        new RegExp(
          `^idem: idem migrate creates only idem_keys and idem_key_history; ${PREFIX}idem_keys and ${PREFIX}idem_key_history, that src/server/db/schema\\.ts defines, are created by your drizzle-kit migrations \\(drizzle-kit generate, then drizzle-kit migrate\\); pass --prefix "" to create the default-named tables anyway$`,
        ),
      );
      // Only a tablesFilter: the default-named tables are outside it, so migrating them is the app's choice.
      const migrated = await run(['migrate'], { cwd: filterOnly });
      expect(migrated.code, migrated.stderr).toBe(0);
      // With both pairs present, the app's folder still finds its own (the schema's) first.
      explains(await run(['explain', key], { cwd: app }));
      expectOneLineError(await run(['explain', key]), 1, /^idem: no record of key /);
    },
  );
});
