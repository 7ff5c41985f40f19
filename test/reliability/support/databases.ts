/**
 * The two stores several processes can share: one SQLite file in WAL mode and one fresh
 * PostgreSQL schema. Each comes with a direct connection of the test's own, for checks that
 * must not go through the app (or through a fault proxy).
 *
 * PostgreSQL needs a server here: PGlite lives inside one process and cannot be shared with
 * child processes, so those suites are skipped on PGlite, unless `IDEM_REQUIRE_POSTGRES=1`,
 * which makes an unreachable server a failure (as in the package suites).
 */
import { createDrizzleStore, migrate, type DrizzleDatabase, type DrizzleStore } from '@idem/drizzle';

/**
 * Issue 24: `IDEM_GROUP_COMMIT=off npx vitest run test/reliability` runs the whole suite with the
 * store's group commit off (the example's processes read the same variable); unset, it is on.
 */
export const GROUP_COMMIT = !['0', 'false', 'off', 'no'].includes(
  (process.env.IDEM_GROUP_COMMIT ?? '').trim().toLowerCase(),
);
/** The store options every scenario uses. */
export const STORE_OPTIONS = { groupCommit: GROUP_COMMIT };
import {
  databaseUrl,
  isServerReachable,
  openPostgresTarget,
  postgresRequired,
} from '../../../packages/drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';

export interface SharedDatabase {
  /** `DATABASE_URL` for the example's processes. The idem tables exist already (migrated on open). */
  url: string;
  /** The test's own connection. */
  db: DrizzleDatabase;
  store: DrizzleStore;
  /** Closes the test's connection and removes the file or schema. */
  close(): Promise<void>;
}

export interface DatabaseKind {
  label: 'SQLite WAL file' | 'PostgreSQL';
  /** False when the suite must skip it (PostgreSQL on PGlite). */
  available: boolean;
  open(): Promise<SharedDatabase>;
}

/** Whether a PostgreSQL server answers (or is required, so that its absence fails the suite). */
export const POSTGRES_SERVER = (await isServerReachable()) || postgresRequired();

export const SQLITE_FILE: DatabaseKind = {
  label: 'SQLite WAL file',
  available: true,
  async open() {
    const target = await openSqliteTarget();
    return ready(target, async () => {
      await migrate(target.db);
      return {
        url: `file:${target.file}`,
        db: target.db,
        store: createDrizzleStore(target.db, STORE_OPTIONS),
        close: () => target.close(),
      };
    });
  },
};

export const POSTGRES_SCHEMA: DatabaseKind = {
  label: 'PostgreSQL',
  available: POSTGRES_SERVER,
  async open() {
    const target = await openPostgresTarget({ max: 4, schemaPrefix: 'idem_reliability' });
    return ready(target, async () => {
      if (target.kind !== 'server' || !target.url)
        throw new Error('[reliability] these scenarios need a PostgreSQL server that child processes can reach');
      await migrate(target.db);
      return {
        url: target.url,
        db: target.db,
        store: createDrizzleStore(target.db, STORE_OPTIONS),
        close: () => target.close(),
      };
    });
  },
};

/** Finishes opening `target`, closing it (file or schema removed) if that fails. */
async function ready(
  target: { close(): Promise<void> },
  finish: () => Promise<SharedDatabase>,
): Promise<SharedDatabase> {
  try {
    return await finish();
  } catch (error) {
    await target.close();
    throw error;
  }
}

/** Both, for `describe.each`. */
export const SHARED_DATABASES: readonly DatabaseKind[] = [SQLITE_FILE, POSTGRES_SCHEMA];

/** Host and port of the PostgreSQL server under test, for a proxy in front of it. */
export function postgresAddress(): { host: string; port: number } {
  const url = new URL(databaseUrl());
  return { host: url.hostname || '127.0.0.1', port: Number(url.port || 5432) };
}
