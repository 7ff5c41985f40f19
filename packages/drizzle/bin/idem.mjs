#!/usr/bin/env node
// The `idem` command of @idem/drizzle. The packages ship TypeScript sources, so tsx is
// registered first to load them; everything else lives in src/cli.ts.
try {
  const { register } = await import('tsx/esm/api');
  register();
  const { runCli } = await import('../src/cli.ts');
  process.exitCode = await runCli(process.argv.slice(2));
} catch (error) {
  // Only a broken installation gets here (runCli reports its own errors): still one line.
  process.stderr.write(`idem: cannot start: ${error instanceof Error ? error.message.split('\n')[0] : String(error)}\n`);
  process.exitCode = 1;
}
