/**
 * The committed drizzle-kit migrations, embedded in the module (src/migrations.generated.ts)
 * instead of read from the package folder, and turned into what drizzle's migrator takes.
 */
import { createHash } from 'node:crypto';
import type { MigrationMeta } from 'drizzle-orm/migrator';
import type { Dialect } from './dialect.js';
import { EMBEDDED_MIGRATIONS } from './migrations.generated.js';

/** One drizzle-kit migration: its journal entry and its SQL file. */
export interface EmbeddedMigration {
  tag: string;
  when: number;
  breakpoints: boolean;
  sql: string;
}

/** What `readMigrationFiles` of `drizzle-orm/migrator` returns for the dialect's folder. */
export function migrationsFor(dialect: Dialect): MigrationMeta[] {
  return EMBEDDED_MIGRATIONS[dialect].map((migration) => ({
    sql: migration.sql.split('--> statement-breakpoint'),
    bps: migration.breakpoints,
    folderMillis: migration.when,
    hash: createHash('sha256').update(migration.sql).digest('hex'),
  }));
}
