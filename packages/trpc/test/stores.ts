/**
 * The stores the black-box suite runs on — one `describe.each` over these, never copies:
 * core's MemoryStore, and @idem/drizzle on a SQLite file (WAL, temporary directory) and on
 * PostgreSQL (a fresh schema at DATABASE_URL, PGlite when no server answers, unless
 * IDEM_REQUIRE_POSTGRES=1). Each target removes its file or schema on close.
 */
import { MemoryStore, type IdempotencyStore } from '@idem/core';
import { createDrizzleStore, migrate } from '@idem/drizzle';
import { openPostgresTarget } from '../../drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../drizzle/test/sqlite-target.ts';

export interface StoreTarget {
  name: string;
  open(): Promise<{ store: IdempotencyStore; close(): Promise<void> }>;
}

export const memoryTarget: StoreTarget = {
  name: 'MemoryStore',
  open: async () => ({ store: new MemoryStore(), close: async () => {} }),
};

export const sqliteTarget: StoreTarget = {
  name: 'SQLite (drizzle, better-sqlite3)',
  async open() {
    const target = await openSqliteTarget();
    await migrate(target.db);
    return { store: createDrizzleStore(target.db), close: () => target.close() };
  },
};

export const postgresTarget: StoreTarget = {
  name: 'PostgreSQL (drizzle)',
  async open() {
    const target = await openPostgresTarget({ schemaPrefix: 'idem_trpc_test' });
    await migrate(target.db);
    return { store: createDrizzleStore(target.db), close: () => target.close() };
  },
};

export const storeTargets: StoreTarget[] = [memoryTarget, sqliteTarget, postgresTarget];
