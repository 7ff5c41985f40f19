import { defineConfig } from 'vitest/config';

/**
 * The drizzle store's suites that also run on the other supported drizzle-orm versions, each
 * resolved from its npm alias (devDependencies of @idem/drizzle) in place of `drizzle-orm`.
 */
const DRIZZLE_VERSION_SUITES = [
  'drizzle-seams',
  'postgres.conformance',
  'sqlite.conformance',
  'postgres.store',
  'sqlite.store',
  'group-commit',
].map((name) => `packages/drizzle/test/${name}.test.ts`);
const onDrizzle = (name: string, alias: string, version: string) => ({
  extends: true as const,
  resolve: { alias: [{ find: /^drizzle-orm(\/.*)?$/, replacement: `${alias}$1` }] },
  test: { name, include: DRIZZLE_VERSION_SUITES, env: { IDEM_DRIZZLE_ORM: version } },
});

/**
 * The libsql suites again on the oldest supported @libsql/client (create-t3-app's ^0.14), resolved
 * from its npm alias in place of `@libsql/client`; only the tests that name libsql.
 */
const onLibsqlClient = (name: string, alias: string) => ({
  extends: true as const,
  resolve: { alias: [{ find: /^@libsql\/client$/, replacement: alias }] },
  test: {
    name,
    include: ['sqlite.conformance', 'sqlite.store', 'drizzle-seams'].map(
      (suite) => `packages/drizzle/test/${suite}.test.ts`,
    ),
    testNamePattern: /libsql/,
    env: { IDEM_LIBSQL_CLIENT: alias },
  },
});

export default defineConfig({
  resolve: {
    // graphql 16 has no `exports` map: Vite would take its ESM `index.mjs` while Node (and so
    // graphql-yoga, loaded outside Vite) takes `index.js`, and two graphql realms cannot share a
    // schema. Point Vite at the file Node uses.
    alias: [{ find: /^graphql$/, replacement: 'graphql/index.js' }],
  },
  test: {
    projects: [
      {
        extends: true,
        test: {
          name: 'default',
          include: ['packages/*/test/**/*.test.ts', 'examples/*/test/**/*.test.ts', 'test/**/*.test.ts'],
        },
      },
      onDrizzle('drizzle-orm@0.41', 'drizzle-orm-041', '0.41.'),
      onDrizzle('drizzle-orm@0.44', 'drizzle-orm-044', '0.44.'),
      onDrizzle('drizzle-orm@1.0', 'drizzle-orm-1', '1.0.0-rc.'),
      onLibsqlClient('@libsql/client@0.14', 'libsql-client-014'),
    ],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Two cores: files run in parallel, but each database suite uses its own schema or file.
    maxWorkers: 2,
  },
});
