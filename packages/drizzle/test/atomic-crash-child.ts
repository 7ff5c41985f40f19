/**
 * The process that dies mid-transaction (atomic.test.ts). Run as
 * `node --import tsx atomic-crash-child.ts '<json>'`: opens its own pool, runs one atomic
 * execution on PostgreSQL whose handler records a payment through the transaction, prints
 * `written <backend pid>` (the PostgreSQL backend that holds the transaction and its advisory
 * lock), and then waits forever, so the test can SIGKILL it before the commit.
 */
import pg from 'pg';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { createEngine } from '@idem/core';
import { createDrizzleStore } from '../src/index.ts';
import { payOnPostgres } from './payments.ts';

export interface CrashChildConfig {
  url: string;
  scope: string;
  key: string;
  paymentId: string;
}

const config = JSON.parse(process.argv[2] ?? '{}') as CrashChildConfig;
const pool = new pg.Pool({ connectionString: config.url, max: 2 });
const engine = createEngine({ store: createDrizzleStore(drizzle(pool)) });
await engine.executeAtomic({ scope: config.scope, key: config.key, fingerprint: 'crash' }, async ({ tx }) => {
  await payOnPostgres(tx, config.paymentId);
  const { rows } = await (tx as NodePgDatabase).execute<{ pid: number }>(sql`SELECT pg_backend_pid() AS pid`);
  process.stdout.write(`written ${rows[0]!.pid}\n`);
  await new Promise(() => {});
});
