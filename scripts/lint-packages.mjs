#!/usr/bin/env node
// Lints what each package ships, as npm would pack it: publint (strict: warnings fail too) and
// are-the-types-wrong. The packages are ESM-only: Node 20.19+ `require()`s them (the consumer
// test proves it), so attw runs with its `esm-only` profile, which leaves out the node10 and
// "CommonJS importing ESM" resolutions that do not apply to such a package.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const packages = ['core', 'drizzle', 'trpc', 'envelop', 'fetch'];
const checks = [
  (dir) => ['publint', ['--strict', dir]],
  (dir) => ['attw', ['--pack', dir, '--profile', 'esm-only', '--format', 'table-flipped']],
];

let failed = 0;
for (const name of packages) {
  for (const check of checks) {
    const [tool, args] = check(`packages/${name}`);
    const run = spawnSync('npx', ['--no-install', tool, ...args], { cwd: root, stdio: 'inherit' });
    if (run.status !== 0) {
      failed++;
      console.error(`[lint:packages] ${tool} failed for @idem/${name}`);
    }
  }
}
if (failed > 0) {
  console.error(`[lint:packages] ${failed} check(s) failed`);
  process.exit(1);
}
console.log(`[lint:packages] publint and attw clean for ${packages.length} packages`);
