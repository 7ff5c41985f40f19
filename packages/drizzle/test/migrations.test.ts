/**
 * `migrate()` carries the drizzle-kit migrations inside its module (so bundled apps need no
 * package folder): the embedded copy must be exactly what drizzle's own reader makes of the
 * committed files.
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { describe, expect, it } from 'vitest';
import { addedColumn } from '../src/migrate.ts';
import { migrationsFor } from '../src/migration-files.ts';

const packageRoot = fileURLToPath(new URL('..', import.meta.url));

describe('embedded migrations', () => {
  for (const dialect of ['sqlite', 'postgres', 'mysql'] as const) {
    it(`${dialect}: are what readMigrationFiles reads from migrations/${dialect}, hashes included`, () => {
      const fromFiles = readMigrationFiles({
        migrationsFolder: fileURLToPath(new URL(`../migrations/${dialect}`, import.meta.url)),
      });
      expect(fromFiles.length).toBeGreaterThan(0);
      expect(migrationsFor(dialect)).toEqual(fromFiles);
    });
  }

  it("addedColumn reads the table and column of drizzle-kit's ALTER TABLE … ADD on every dialect, and nothing else", () => {
    const added = (['sqlite', 'postgres', 'mysql'] as const).flatMap((dialect) =>
      migrationsFor(dialect).flatMap((migration) => migration.sql.map(addedColumn).filter(Boolean)),
    );
    const columns = (...names: string[]) =>
      ['idem_key_history', 'idem_keys'].flatMap((table) => names.map((column) => ({ table, column })));
    expect(added).toEqual(
      Array.from({ length: 3 }, () => [...columns('waits'), ...columns('on_failure', 'attempts', 'steps')]).flat(),
    );
    expect(addedColumn('CREATE TABLE IF NOT EXISTS `idem_keys` (`waits` int)')).toBeUndefined();
  });

  it('src/migrations.generated.ts is up to date with the SQL files (embed-migrations --check)', () => {
    expect(() =>
      execFileSync(process.execPath, ['scripts/embed-migrations.mjs', '--check'], { cwd: packageRoot, stdio: 'pipe' }),
    ).not.toThrow();
  });
});
