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
].map((name) => `packages/drizzle/test/${name}.test.ts`);
const onDrizzle = (name: string, alias: string, version: string) => ({
  extends: true as const,
  resolve: { alias: [{ find: /^drizzle-orm(\/.*)?$/, replacement: `${alias}$1` }] },
  test: { name, include: DRIZZLE_VERSION_SUITES, env: { IDEM_DRIZZLE_ORM: version } },
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
      onDrizzle('drizzle-orm@0.44', 'drizzle-orm-044', '0.44.'),
      onDrizzle('drizzle-orm@1.0', 'drizzle-orm-1', '1.0.0-rc.'),
    ],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Two cores: files run in parallel, but each database suite uses its own schema or file.
    maxWorkers: 2,
  },
});
