/**
 * Real stores whose database cannot be reached (E5), for the adapters' tests: a drizzle store on
 * a SQLite connection that has been closed, and one on a PostgreSQL pool pointed at a closed port.
 * Nothing is stubbed: every call goes through the store and fails in the driver.
 */
import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { createDrizzleStore, migrate, type DrizzleStore } from '../src/index.ts';
import { openSqliteConnection, openSqliteTarget } from './sqlite-target.ts';

export interface UnreachableStore {
  store: DrizzleStore;
  /**
   * A store on the same database reached again (a new connection to the SQLite file), to show
   * that nothing was stored; undefined where the database itself is the one that is down.
   */
  reconnect?(): DrizzleStore;
  close(): Promise<void>;
}

export const UNREACHABLE_POSTGRES_URL = 'postgres://postgres@127.0.0.1:1/unreachable';

export const unreachableStores: Array<{ name: string; open(): Promise<UnreachableStore> }> = [
  {
    name: 'SQLite, connection closed',
    async open() {
      const target = await openSqliteTarget();
      await migrate(target.db);
      const store = createDrizzleStore(target.db);
      target.client.close();
      const reopened: Array<{ close(): void }> = [];
      return {
        store,
        reconnect() {
          const { client, db } = openSqliteConnection(target.file);
          reopened.push(client);
          return createDrizzleStore(db);
        },
        async close() {
          for (const client of reopened) client.close();
          await target.close();
        },
      };
    },
  },
  {
    name: 'PostgreSQL, closed port',
    async open() {
      const pool = new pg.Pool({ connectionString: UNREACHABLE_POSTGRES_URL, connectionTimeoutMillis: 1000 });
      return { store: createDrizzleStore(drizzle(pool)), close: () => pool.end() };
    },
  },
];
