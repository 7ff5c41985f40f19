#!/usr/bin/env node
// The `idem` command. This file is committed, not built: npm links a package's bins when it
// installs it, and in a clone of the repository that happens before `prepare` builds dist/, so a
// bin pointing into dist/ would never be linked there (`npx idem` then finds nothing to run).
let cli;
try {
  cli = await import('../dist/cli/index.js');
} catch (error) {
  if (error?.code !== 'ERR_MODULE_NOT_FOUND' || !String(error.url ?? '').endsWith('/dist/cli/index.js')) throw error;
  process.stderr.write(
    'idem: @idem/drizzle is not built (no dist/cli/index.js): run `npm run build` in the repository\n',
  );
  process.exit(1);
}
process.exitCode = await cli.runCli(process.argv.slice(2));
