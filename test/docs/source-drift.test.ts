/**
 * The source comments and the pages stay true as the code moves. Drift found in review (issue
 * 32), held out by a check each:
 *
 * - benchmark figures in code comments (`≈80 µs`, `a few µs`): they rot; figures belong in
 *   bench/README.md, where each has its run, its machine and its date;
 * - a file named in a comment or a page that no longer exists (`pg-group.ts` after the dialect
 *   folders, `dist/cli.js` after the CLI's);
 * - statements of which drivers or dialects a behaviour covers, left behind when another gained
 *   it: the libsql write queue said to be for a local file only (it wraps remote `libsql://` too),
 *   `'tick'` groups said to be better-sqlite3's only (libsql on a local file groups by tick too),
 *   "dialects without the many forms" (every dialect has them), `busyRetryMs` "ignored on
 *   PostgreSQL" (and on MySQL).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const tracked = execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' }).split('\n').filter(Boolean);
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');

const sources = tracked.filter((file) => /^packages\/[^/]+\/src\/.*\.ts$/.test(file));
/** What users read (CHANGELOG.md aside: it names what files were, on purpose). */
const pages = tracked.filter((file) =>
  /^(?:README\.md|CONTRIBUTING\.md|docs\/[^/]+\.md|bench\/README\.md|(?:packages|examples)\/[^/]+\/README\.md)$/.test(
    file,
  ),
);

/** The comment lines of a TypeScript source (`//` and the lines of a `/** … *\/` block). */
const commentLines = (text: string) =>
  text.split('\n').filter((line) => /^\s*(?:\/\/|\/\*|\*)/.test(line) || /\s\/\/\s/.test(line));

/** Files a page or comment may name that are the user's (or another package's), not this repository's. */
const NOT_OURS = new Set([
  '.d.ts',
  'drizzle.config.ts',
  'graphql/index.js',
  'index.js',
  'index.mjs',
  'src/server/idem.ts',
  'src/trpc/server.ts',
]);

describe('docs: source comments and pages stay true as the code moves', () => {
  it('no benchmark figure sits in a source comment (figures live in bench/README.md)', () => {
    const figure =
      /\d\s*(?:µs|ns|req\/s|ops\/s)\b|≈\s*\d|\ba few µs\b|\d(?:\.\d+)?\s*×\s*(?:faster|slower)|\b\d+(?:\.\d+)?× (?:faster|slower)/;
    const found = sources.flatMap((file) =>
      commentLines(read(file))
        .filter((line) => figure.test(line))
        .map((line) => `${file}: ${line.trim()}`),
    );
    expect(found).toEqual([]);
  });

  it('every file a page or a source comment names in backticks exists', () => {
    // A built file (`dist/cli/index.js`) exists when its source does.
    const sourceOf = (name: string) => name.replace(/^dist\/(.*)\.js$/, 'src/$1.ts');
    const exists = (name: string) =>
      tracked.some((file) => file === sourceOf(name) || file.endsWith(`/${sourceOf(name)}`));
    const missing = [...sources, ...pages].flatMap((file) =>
      [...read(file).matchAll(/`([\w./-]+\.(?:ts|mjs|js))`/g)]
        .map((match) => match[1]!.replace(/^\.\//, ''))
        .filter((name) => !NOT_OURS.has(name) && !exists(name))
        .map((name) => `${file}: ${name}`),
    );
    expect(missing).toEqual([]);
  });

  it('no comment or page says a driver or dialect is left out of what it now has', () => {
    const stale = [
      /write queue[^.]*\blocal[- ]file only\b|queue[^.]*: for libsql on a local file\./i,
      /'tick' \(synchronous\s+better-sqlite3/,
      /dialects without the many forms/i,
      /ignored on PostgreSQL\.(?! and)/i,
    ];
    const found = [...sources, ...pages].flatMap((file) => {
      const text = read(file).replace(/\s*\n\s*(?:\*|\/\/)?\s*/g, ' ');
      return stale.filter((pattern) => pattern.test(text)).map((pattern) => `${file}: ${pattern}`);
    });
    expect(found).toEqual([]);
  });

  it('busyRetryMs says it is ignored on every dialect but SQLite', () => {
    const store = read('packages/drizzle/src/drizzle-store.ts');
    const before = store.slice(0, store.indexOf('busyRetryMs?:'));
    const doc = before.slice(before.lastIndexOf('/**')).replace(/\s*\n\s*\*\s*/g, ' ');
    expect(doc).toMatch(/Ignored on PostgreSQL and MySQL/);
  });
});
