import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: {
    // graphql 16 has no `exports` map: Vite would take its ESM `index.mjs` while Node (and so
    // graphql-yoga, loaded outside Vite) takes `index.js`, and two graphql realms cannot share a
    // schema. Point Vite at the file Node uses.
    alias: [{ find: /^graphql$/, replacement: 'graphql/index.js' }],
  },
  test: {
    include: ['packages/*/test/**/*.test.ts', 'examples/*/test/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Two cores: files run in parallel, but each database suite uses its own schema or file.
    maxWorkers: 2,
  },
});
