/**
 * The READMEs say what the code does. Drift this project had, held out by a check each:
 *
 * - a function the prose of a user's page names as `name(…)` is exported by an entry of an @idem package (the
 *   core README documented `problemType`, which no entry exports), or is on the list below of
 *   the host's, the database's and the option names the prose calls;
 * - a snippet that opens better-sqlite3 does so with `timeout: 0` (its default busy timeout
 *   sleeps the whole process on a lock: the Drizzle store guide's Don't/Do, docs/drizzle.md);
 * - no page says the packages ship TypeScript to run or that the bin registers tsx (they ship
 *   compiled JavaScript; the bin is plain JavaScript).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PACKAGES = ['core', 'drizzle', 'trpc', 'envelop', 'fetch', 'apollo-server'];

const markdownFiles = execFileSync('git', ['ls-files', '*.md'], { cwd: ROOT, encoding: 'utf8' })
  .split('\n')
  .filter(Boolean);
/** What users read: the READMEs of the repository, the packages and the examples, and docs/. */
const userPages = markdownFiles.filter((file) =>
  /^(?:README\.md|CONTRIBUTING\.md|docs\/[^/]+\.md|(?:packages|examples)\/[^/]+\/README\.md)$/.test(file),
);
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');
const fences = (text: string) => [...text.matchAll(/```(?:ts|js|tsx|mjs)\n([\s\S]*?)```/g)].map((match) => match[1]!);
const prose = (text: string) => text.replace(/```[\s\S]*?```/g, '');

/**
 * Every name the packages' entries export, read from their declarations (`npm test` builds
 * first): what an entry declares itself, and the names its `export { … }` lists give on.
 */
function exportedNames(): Set<string> {
  const names = new Set<string>();
  for (const name of PACKAGES) {
    const dir = path.join(ROOT, 'packages', name);
    const { exports } = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as {
      exports: Record<string, string | { types: string }>;
    };
    for (const target of Object.values(exports)) {
      if (typeof target === 'string') continue;
      const text = readFileSync(path.join(dir, target.types), 'utf8');
      for (const match of text.matchAll(/export (?:declare )?(?:function|const|class|type|interface|let)\s+([\w$]+)/g))
        names.add(match[1]!);
      for (const match of text.matchAll(/export (?:type )?\{([^}]*)\}/g))
        for (const part of match[1]!.split(',')) {
          const exported = part
            .trim()
            .replace(/^type\s+/, '')
            .split(/\s+as\s+/)
            .pop();
          if (exported) names.add(exported);
        }
    }
  }
  return names;
}

/** Called by name in the prose, and not idem's: host APIs, SQL, driver and client methods, options. */
const NOT_IDEMS = new Set([
  // Node, drizzle, drivers, SQL
  'require',
  'drizzle',
  'is',
  'transaction',
  'prepare',
  'execute',
  'createClient',
  'current_schema',
  'statement_timestamp',
  'now',
  'UTC_TIMESTAMP',
  'datetime',
  'varbinary',
  'GET_LOCK',
  // tRPC, zod, create-t3-app, GraphQL clients
  'createTRPCContext',
  'flatten',
  'mutate',
  'getHeaders',
  // GraphQL Yoga's CSRF plugin, which csrfPrevention runs
  'useCSRFPrevention',
  'random',
  // store and engine methods, options that take a function, the example's mutation
  'timeline',
  'claim',
  // the GraphQL plugins' method that publishes their mutations (R4)
  'describeEndpoints',
  'next',
  'onEvent',
  'onRetry',
  'principal',
  'createPayment',
]);

describe('docs: what the READMEs name exists, and what they show is what they advise', () => {
  it('every function the prose calls is exported by an @idem entry, or is the host’s', () => {
    const exported = exportedNames();
    const unknown: string[] = [];
    for (const file of userPages) {
      for (const match of prose(read(file)).matchAll(/`([A-Za-z_$][\w$]*)\(/g)) {
        const name = match[1]!;
        if (!exported.has(name) && !NOT_IDEMS.has(name)) unknown.push(`${file}: ${name}(`);
      }
    }
    expect(unknown).toEqual([]);
  });

  it('every snippet that opens better-sqlite3 turns its blocking busy timeout off (timeout: 0)', () => {
    const blocking: string[] = [];
    for (const file of markdownFiles) {
      for (const code of fences(read(file))) {
        for (const match of code.matchAll(/new Database\(([^)]*)\)/g))
          if (!/timeout:\s*0\b/.test(match[1]!)) blocking.push(`${file}: ${match[0]}`);
      }
    }
    expect(blocking).toEqual([]);
  });

  it('no page says the packages ship TypeScript to run, or that the bin registers tsx', () => {
    const claims = markdownFiles.flatMap((file) =>
      [/registers \[?tsx/i, /ship(?:s)? TypeScript sources/i, /tsx is therefore a runtime dependency/i]
        .filter((claim) => claim.test(read(file)))
        .map((claim) => `${file}: ${claim}`),
    );
    expect(claims).toEqual([]);
  });
});
