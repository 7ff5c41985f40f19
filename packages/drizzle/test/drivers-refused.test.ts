/**
 * Drivers that cannot run here (no Neon, Vercel or Cloudflare endpoint): `createDrizzleStore`
 * and `migrate` tell at once what a driver lacks, from the drizzle instance alone (nothing is
 * sent; the clients below are never connected). The D1 binding is a placeholder object: only
 * Cloudflare's runtime makes real ones, and detection never calls it.
 */
import { neon, Pool as NeonPool } from '@neondatabase/serverless';
import pg from 'pg';
import { drizzle as drizzleD1 } from 'drizzle-orm/d1';
import { drizzle as drizzleNeonHttp } from 'drizzle-orm/neon-http';
import { drizzle as drizzleNeonServerless } from 'drizzle-orm/neon-serverless';
import { drizzle as drizzleNodePostgres } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePgProxy } from 'drizzle-orm/pg-proxy';
import { drizzle as drizzleSqliteProxy } from 'drizzle-orm/sqlite-proxy';
import { describe, expect, it } from 'vitest';
import { createDrizzleStore, migrate } from '../src/index.ts';

const NEON_URL = 'postgres://user:password@ep-example-123456.eu-central-1.aws.neon.tech/neondb';

describe('drivers the store refuses, with the reason', () => {
  it('neon-http: no interactive transactions, so neither the store (R2 reuse, atomic mode) nor migrate', async () => {
    const db = drizzleNeonHttp({ client: neon(NEON_URL) });
    expect(() => createDrizzleStore(db)).toThrow(TypeError);
    expect(() => createDrizzleStore(db)).toThrow(
      /^\[idem\] neon-http has no interactive transactions .*neon-serverless/,
    );
    await expect(migrate(db)).rejects.toThrow(/\[idem\] neon-http has no interactive transactions/);
  });

  it('Cloudflare D1: its transactions fail', () => {
    const binding = {} as Parameters<typeof drizzleD1>[0];
    expect(() => createDrizzleStore(drizzleD1(binding))).toThrow(/^\[idem\] Cloudflare D1 refuses transactions/);
  });

  it('node-postgres on a single pg.Client: its transactions would interleave; a pg.Pool is accepted', async () => {
    const client = new pg.Client({ connectionString: 'postgres://postgres@127.0.0.1:1/never' });
    expect(() => createDrizzleStore(drizzleNodePostgres({ client }))).toThrow(
      /^\[idem\] node-postgres: pass a pg.Pool, not a single pg.Client/,
    );
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/never' });
    expect(createDrizzleStore(drizzleNodePostgres({ client: pool }))).toMatchObject({
      dialect: 'postgres',
      driver: 'node-postgres',
      transaction: expect.any(Function),
    });
    await pool.end();
  });

  it('drivers idem does not know (the HTTP proxies) are refused by name rather than run on a guess', () => {
    expect(() => createDrizzleStore(drizzlePgProxy(async () => ({ rows: [] })))).toThrow(
      /^\[idem\] unsupported PostgreSQL driver \(drizzle's PgRemoteDatabase\)/,
    );
    expect(() => createDrizzleStore(drizzleSqliteProxy(async () => ({ rows: [] })))).toThrow(
      /^\[idem\] unsupported SQLite driver \(drizzle's SqliteRemoteDatabase\)/,
    );
  });
});

describe('drivers accepted but untested here', () => {
  it('neon-serverless (a WebSocket Pool): the PostgreSQL store, with atomic mode', async () => {
    const pool = new NeonPool({ connectionString: NEON_URL });
    expect(createDrizzleStore(drizzleNeonServerless({ client: pool }))).toMatchObject({
      dialect: 'postgres',
      driver: 'neon-serverless',
      transaction: expect.any(Function),
    });
    await pool.end();
  });
});
