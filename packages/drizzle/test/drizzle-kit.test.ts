/**
 * S1: idem's tables in the user's own drizzle schema. A scratch project (as create-t3-app sets
 * one up: `tablesFilter: ['project_*']`) exports `definePgTables({ prefix: 'project_' })` /
 * `defineSqliteTables(...)` from its schema and runs drizzle-kit `generate`; the SQL it writes,
 * applied to a fresh database, must make what `migrate()` makes in another one — the same
 * columns (types, nullability, defaults), keys and indexes, the partial expiry index included —
 * under the prefixed names; and the store runs on those tables.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import { afterAll, describe, expect, it } from 'vitest';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { DRIVERS, type DriverTarget } from './drivers.ts';
import { claimed } from './store-behaviour.ts';

const PREFIX = 'project_';
const repository = fileURLToPath(new URL('../../..', import.meta.url));
// The built entry, as a user's project imports it (`npm test` builds first).
const entry = fileURLToPath(new URL('../dist/index.js', import.meta.url));
const drizzleKit = join(repository, 'node_modules/.bin/drizzle-kit');

const scratch: string[] = [];
afterAll(() => {
  for (const directory of scratch) rmSync(directory, { recursive: true, force: true });
});

/** Runs drizzle-kit generate in a scratch project whose schema exports the prefixed tables; answers the SQL statements. */
function generate(dialect: 'postgresql' | 'sqlite'): string[] {
  const directory = mkdtempSync(join(tmpdir(), 'idem-drizzle-kit-'));
  scratch.push(directory);
  const define = dialect === 'postgresql' ? 'definePgTables' : 'defineSqliteTables';
  writeFileSync(
    join(directory, 'schema.ts'),
    `import { ${define} } from ${JSON.stringify(entry)};\n\nexport const { keys: idemKeys, history: idemKeyHistory } = ${define}({ prefix: '${PREFIX}' });\n`,
  );
  writeFileSync(
    join(directory, 'drizzle.config.ts'),
    `export default { dialect: '${dialect}', schema: './schema.ts', out: './drizzle', tablesFilter: ['${PREFIX}*'] };\n`,
  );
  execFileSync(drizzleKit, ['generate', '--config', 'drizzle.config.ts'], { cwd: directory, stdio: 'pipe' });
  const files = readdirSync(join(directory, 'drizzle')).filter((file) => file.endsWith('.sql'));
  expect(files).toHaveLength(1);
  return readFileSync(join(directory, 'drizzle', files[0]!), 'utf8')
    .split('--> statement-breakpoint')
    .map((statement) => statement.trim())
    .filter(Boolean);
}

const unprefixed = (value: unknown) => (typeof value === 'string' ? value.replaceAll(PREFIX, '') : value);
const normalized = (rows: Array<Record<string, unknown>>) =>
  rows.map((row) => Object.fromEntries(Object.entries(row).map(([name, value]) => [name, unprefixed(value)])));

/** Columns, primary keys and indexes of idem's tables in the connection's schema, names without the prefix. */
async function pgStructure(target: DriverTarget) {
  const columns = await target.rows<Record<string, unknown>>(sql`
    SELECT table_name, ordinal_position, column_name, data_type, datetime_precision, is_nullable, column_default
    FROM information_schema.columns WHERE table_schema = current_schema() AND table_name LIKE ${`%idem_key%`}
    ORDER BY replace(table_name, ${PREFIX}, ''), ordinal_position`);
  const keys = await target.rows<Record<string, unknown>>(sql`
    SELECT tc.table_name, tc.constraint_name, kcu.column_name, kcu.ordinal_position
    FROM information_schema.table_constraints tc
    JOIN information_schema.key_column_usage kcu ON kcu.constraint_schema = tc.constraint_schema AND kcu.constraint_name = tc.constraint_name
    WHERE tc.table_schema = current_schema() AND tc.constraint_type = 'PRIMARY KEY' AND tc.table_name LIKE ${`%idem_key%`}
    ORDER BY replace(tc.table_name, ${PREFIX}, ''), kcu.ordinal_position`);
  const indexes = await target.rows<{ indexname: string; indexdef: string }>(sql`
    SELECT indexname, replace(indexdef, current_schema() || '.', '') AS indexdef
    FROM pg_indexes WHERE schemaname = current_schema() AND tablename LIKE ${`%idem_key%`} ORDER BY replace(indexname, ${PREFIX}, '')`);
  return { columns: normalized(columns), keys: normalized(keys), indexes: normalized(indexes) };
}

async function sqliteStructure(target: DriverTarget, tables: { keys: string; history: string }) {
  const structure: Record<string, unknown> = {};
  for (const table of [tables.keys, tables.history]) {
    const indexes = await target.rows<{ name: string; unique: number; origin: string; partial: number }>(
      sql`SELECT name, "unique", origin, partial FROM pragma_index_list(${table}) ORDER BY name`,
    );
    const indexColumns: Record<string, unknown> = {};
    for (const index of indexes)
      indexColumns[unprefixed(index.name) as string] = await target.rows(
        sql`SELECT seqno, name FROM pragma_index_info(${index.name}) ORDER BY seqno`,
      );
    // The partial indexes' predicates, as SQLite keeps them (IF NOT EXISTS dropped, quotes as written).
    const definitions = await target.rows<{ name: string; sql: string }>(
      sql`SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ${table} AND sql IS NOT NULL ORDER BY name`,
    );
    structure[unprefixed(table) as string] = {
      columns: await target.rows(
        sql`SELECT cid, name, type, "notnull", dflt_value, pk FROM pragma_table_info(${table}) ORDER BY cid`,
      ),
      indexes: normalized(indexes),
      indexColumns,
      definitions: normalized(
        definitions.map(({ name, sql: text }) => ({ name, sql: text.replace(/\s+/g, ' ').replace(/["`]/g, '') })),
      ),
    };
  }
  return structure;
}

const pgSpec = DRIVERS.find((spec) => spec.dialect === 'postgres' && spec.runs)!;
const sqliteSpec = DRIVERS.find((spec) => spec.name === 'better-sqlite3')!;

describe('S1: drizzle-kit generate with the exported tables makes what migrate() makes', () => {
  it(`PostgreSQL (${pgSpec.name}): columns, primary keys and indexes, the partial expiry index included; the store runs on them`, {
    timeout: 60_000,
  }, async () => {
    const statements = generate('postgresql');
    const generated = await pgSpec.open({ schemaPrefix: 'idem_kit' });
    const migrated = await pgSpec.open({ schemaPrefix: 'idem_kit' });
    try {
      for (const statement of statements) await generated.exec(statement);
      await migrate(migrated.db);
      const fromKit = await pgStructure(generated);
      expect(fromKit).toEqual(await pgStructure(migrated));
      expect(fromKit.indexes).toContainEqual({
        indexname: 'idem_keys_expires_at_idx',
        indexdef: expect.stringMatching(/ON idem_keys USING btree \(expires_at\) WHERE \(state <> 'archived'::text\)$/),
      });
      expect(fromKit.keys.filter((key) => key.table_name === 'idem_keys').map((key) => key.column_name)).toEqual([
        'scope',
        'key',
      ]);
      await expectStoreOnPrefixedTables(generated);
    } finally {
      await generated.close();
      await migrated.close();
    }
  });

  it('SQLite (better-sqlite3): columns, primary keys and indexes, the partial expiry index included; the store runs on them', {
    timeout: 60_000,
  }, async () => {
    const statements = generate('sqlite');
    const generated = await sqliteSpec.open();
    const migrated = await sqliteSpec.open();
    try {
      for (const statement of statements) await generated.exec(statement);
      await migrate(migrated.db);
      const fromKit = await sqliteStructure(generated, {
        keys: `${PREFIX}idem_keys`,
        history: `${PREFIX}idem_key_history`,
      });
      expect(fromKit).toEqual(await sqliteStructure(migrated, { keys: 'idem_keys', history: 'idem_key_history' }));
      expect(fromKit.idem_keys).toMatchObject({
        definitions: expect.arrayContaining([
          {
            name: 'idem_keys_expires_at_idx',
            sql: "CREATE INDEX idem_keys_expires_at_idx ON idem_keys (expires_at) WHERE state <> 'archived'",
          },
        ]),
      });
      await expectStoreOnPrefixedTables(generated);
    } finally {
      await generated.close();
      await migrated.close();
    }
  });
});

/** A claim, its completion, a replay and a sweep on the prefixed tables, through `tables: { prefix }`. */
async function expectStoreOnPrefixedTables(target: DriverTarget) {
  const store = createDrizzleStore(target.db, { tables: { prefix: PREFIX } });
  expect(store.tables).toEqual({ keys: `${PREFIX}idem_keys`, history: `${PREFIX}idem_key_history` });
  const request = {
    scope: 's',
    key: randomUUID(),
    fingerprint: 'f',
    token: randomUUID(),
    leaseMs: 60_000,
    retentionMs: 60_000,
    expiredReuse: 'execute',
  } as const;
  claimed(await store.claim(request));
  expect(
    await store.complete({
      scope: 's',
      key: request.key,
      token: request.token,
      outcome: { kind: 'success', status: 200, body: '"ok"' },
    }),
  ).toBe(true);
  expect(await store.claim({ ...request, token: randomUUID() })).toMatchObject({
    outcome: 'existing',
    record: { outcome: { body: '"ok"' } },
  });
  expect(await store.sweep()).toEqual({ archived: 0 });
  const [row] = await target.rows<{ n: number | string }>(
    sql`SELECT count(*) AS n FROM ${sql.identifier(`${PREFIX}idem_keys`)}`,
  );
  expect(Number(row?.n)).toBe(1);
}
