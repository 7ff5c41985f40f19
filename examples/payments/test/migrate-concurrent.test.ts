/**
 * Several servers starting at once on one database each run the example's start-up DDL
 * (`migrate(db)`, then `PaymentChannel.migrate()`): the reliability suite starts five on a fresh
 * PostgreSQL schema, and one CI run failed there with `column "idempotency_key" of relation
 * "payments_ledger" already exists` (a column read as missing by two servers, added by both).
 *
 * Generated: the ledger as each earlier version of the example left it (none, without
 * `downstream_key`, without `idempotency_key`, current), and 2–6 servers migrating at once, each
 * on its own connection. Oracle: every server starts, and the tables end with every column the
 * current version writes (a payment and the per-key count work).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { drizzle as drizzleSqlite } from 'drizzle-orm/better-sqlite3';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { sql } from 'drizzle-orm';
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { DrizzleDatabase } from '@idem/drizzle';
import { openPostgresTarget } from '../../../packages/drizzle/test/pg-target.ts';
import { PaymentChannel, type PaymentClaim } from '../src/channel.ts';
import { migrateExample } from './http.ts';

/** The ledger as an earlier version of the example created it. */
const LEGACY = {
  none: undefined,
  'before downstream_key': (pgDialect: boolean) =>
    pgDialect
      ? 'CREATE TABLE payments_ledger (seq bigserial PRIMARY KEY, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())'
      : 'CREATE TABLE payments_ledger (seq integer PRIMARY KEY AUTOINCREMENT, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at text NOT NULL)',
  'before idempotency_key': (pgDialect: boolean) =>
    pgDialect
      ? 'CREATE TABLE payments_ledger (seq bigserial PRIMARY KEY, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), downstream_key text UNIQUE)'
      : 'CREATE TABLE payments_ledger (seq integer PRIMARY KEY AUTOINCREMENT, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at text NOT NULL, downstream_key text UNIQUE)',
} as const;
type Legacy = keyof typeof LEGACY | 'current';
const legacyShape = fc.constantFrom<Legacy>('none', 'before downstream_key', 'before idempotency_key', 'current');

/** Every server's connection to one fresh database, and a way to end them. */
interface Fleet {
  pg: boolean;
  dbs: DrizzleDatabase[];
  close(): Promise<void>;
}

async function prepare(
  open: (servers: number) => Promise<Fleet & { exec(statement: string): Promise<void> }>,
  legacy: Legacy,
  servers: number,
) {
  const fleet = await open(servers);
  if (legacy === 'current') await migrateExample(fleet.dbs[0] as DrizzleDatabase);
  else {
    const create = LEGACY[legacy];
    if (create) await fleet.exec(create(fleet.pg));
  }
  return fleet;
}

async function startAllAndCheck(fleet: Fleet) {
  const started = await Promise.allSettled(fleet.dbs.map((db) => migrateExample(db)));
  const failures = started.flatMap((outcome) => (outcome.status === 'rejected' ? [causeChain(outcome.reason)] : []));
  expect(failures).toEqual([]);
  // What the current version writes and reads, through one of the servers.
  const channel = new PaymentChannel(fleet.dbs.at(-1) as DrizzleDatabase);
  const claim: PaymentClaim = {
    scope: 'test',
    key: 'k-1',
    deriveKey: (name) => `k-1:${name}`,
    step: async (name, run) => run(`k-1:${name}`),
  };
  await channel.pay({ account: 'acct', amount: 100, currency: 'usd' }, claim);
  const counts = await channel.keyLedger('acct', 'k-1');
  expect(counts).toMatchObject({ reservations: 1, charges: 1 });
}

const sqliteDirs: string[] = [];
afterAll(() => {
  for (const dir of sqliteDirs) rmSync(dir, { recursive: true, force: true });
});

function openSqlite(servers: number) {
  const dir = mkdtempSync(join(tmpdir(), 'idem-migrate-race-'));
  sqliteDirs.push(dir);
  const connections = Array.from({ length: servers }, () => new Database(join(dir, 'payments.db')));
  return Promise.resolve({
    pg: false,
    dbs: connections.map((client) => drizzleSqlite({ client }) as unknown as DrizzleDatabase),
    exec: async (statement: string) => {
      (connections[0] as Database.Database).exec(statement);
    },
    close: async () => {
      for (const connection of connections) connection.close();
    },
  });
}

async function openPostgres(servers: number) {
  const target = await openPostgresTarget({ schemaPrefix: 'idem_migrate_race' });
  if (target.kind !== 'server' || !target.url) {
    // PGlite is one connection: no concurrency to test.
    await target.close();
    return undefined;
  }
  const pools = Array.from({ length: servers }, () => new pg.Pool({ connectionString: target.url, max: 2 }));
  return {
    pg: true,
    dbs: pools.map((client) => drizzlePg({ client }) as unknown as DrizzleDatabase),
    exec: async (statement: string) => {
      await (target.db as { execute(query: unknown): Promise<unknown> }).execute(sql.raw(statement));
    },
    close: async () => {
      await Promise.all(pools.map((pool) => pool.end()));
      await target.close();
    },
  };
}

describe('the example starting several servers at once on one database', () => {
  it('SQLite: every server starts, whatever version of the ledger it finds', async () => {
    await fc.assert(
      fc.asyncProperty(legacyShape, fc.integer({ min: 2, max: 6 }), async (legacy, servers) => {
        const fleet = await prepare(openSqlite, legacy, servers);
        try {
          await startAllAndCheck(fleet);
        } finally {
          await fleet.close();
        }
      }),
      { numRuns: 25 },
    );
  });

  it('PostgreSQL: every server starts, whatever version of the ledger it finds', async () => {
    await fc.assert(
      fc.asyncProperty(legacyShape, fc.integer({ min: 2, max: 6 }), async (legacy, servers) => {
        const fleet = await prepare(async (n) => (await openPostgres(n)) ?? (await openSqlite(n)), legacy, servers);
        try {
          await startAllAndCheck(fleet);
        } finally {
          await fleet.close();
        }
      }),
      { numRuns: 20 },
    );
  });
});

function causeChain(error: unknown): string {
  const chain: string[] = [];
  for (let cause: unknown = error; cause !== undefined; cause = (cause as { cause?: unknown }).cause)
    chain.push(`${String(cause)} code=${String((cause as { code?: unknown }).code)}`);
  return chain.join(' <- ');
}
