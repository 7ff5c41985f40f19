/**
 * The application table of the atomic-mode tests: a handler records a payment in it through
 * the transaction it is given, so the tests can count the effects that committed.
 */
import { sql } from 'drizzle-orm';
import type { NodePgDatabase } from 'drizzle-orm/node-postgres';
import { mysqlTable, varchar as mysqlVarchar } from 'drizzle-orm/mysql-core';
import type { MySql2Database } from 'drizzle-orm/mysql2';
import { pgTable, text as pgText, type PgDatabase, type PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { sqliteTable, text as sqliteText } from 'drizzle-orm/sqlite-core';
import type { BetterSQLite3Database } from 'drizzle-orm/better-sqlite3';

export const pgPayments = pgTable('payments', { id: pgText('id').primaryKey() });
export const sqlitePayments = sqliteTable('payments', { id: sqliteText('id').primaryKey() });

export const mysqlPayments = mysqlTable('payments', { id: mysqlVarchar('id', { length: 255 }).primaryKey() });

export const CREATE_PAYMENTS = 'CREATE TABLE payments (id text PRIMARY KEY)';
/** MySQL cannot index a `text` column whole. */
export const CREATE_MYSQL_PAYMENTS = 'CREATE TABLE payments (id varchar(255) PRIMARY KEY)';

/** Records payment `id` through the PostgreSQL transaction a handler was given. */
export async function payOnPostgres(tx: unknown, id: string): Promise<void> {
  await (tx as NodePgDatabase).insert(pgPayments).values({ id });
}

/** Records payment `id` through the SQLite transaction a handler was given: synchronous. */
export function payOnSqlite(tx: unknown, id: string): void {
  (tx as BetterSQLite3Database).insert(sqlitePayments).values({ id }).run();
}

export async function countPgPayments(db: PgDatabase<PgQueryResultHKT, any, any>): Promise<number> {
  const [row] = await db.select({ n: sql<number>`count(*)::int` }).from(pgPayments);
  return row?.n ?? 0;
}

export function countSqlitePayments(db: BetterSQLite3Database): number {
  return db.select({ n: sql<number>`count(*)` }).from(sqlitePayments).get()?.n ?? 0;
}

/** Records payment `id` through the MySQL transaction a handler was given. */
export async function payOnMysql(tx: unknown, id: string): Promise<void> {
  await (tx as MySql2Database).insert(mysqlPayments).values({ id });
}

export async function countMysqlPayments(db: MySql2Database): Promise<number> {
  const [row] = await db.select({ n: sql<number>`count(*)` }).from(mysqlPayments);
  return Number(row?.n ?? 0);
}
