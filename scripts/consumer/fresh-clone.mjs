// The consumer test's fresh-clone part: what the READMEs tell a contributor to type. `git clone`
// this repository, `npm ci` in the clone (which builds dist/ in `prepare`, after npm linked the
// workspace bins), and `npx idem --help` right after: npm links a bin only if its file exists at
// install time, so the bin must not point into dist/ (packages/drizzle/bin/idem.js is committed).
import { join } from 'node:path';

export async function freshCloneSteps({ root, work, helpers }) {
  const { step, run, assert, log } = helpers;
  await step('a fresh clone: npm ci (no EBADENGINE warning), then npx idem --help and --version', async () => {
    const clone = join(work, 'clone');
    await run('git', ['clone', '--quiet', root, clone]);
    const installed = await run('npm', ['ci', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=warn'], {
      cwd: clone,
      timeout: 900_000,
    });
    // The README says Node 20.19+: npm ci there warns about no package's engines (issue 37).
    assert(!/EBADENGINE/.test(installed.stderr), `npm ci warned about engines:\n${installed.stderr}`);
    const help = await run('npx', ['--no-install', 'idem', '--help'], { cwd: clone });
    assert(help.stdout.startsWith('Usage: idem <command> [options]'), `npx idem --help printed:\n${help.stdout}`);
    const version = await run('npx', ['--no-install', 'idem', '--version'], { cwd: clone });
    log(`  npx idem --version: ${version.stdout.trim().split('\n').join(' | ')}`);
    const explain = await run('npx', ['--no-install', 'idem', 'help', 'explain'], { cwd: clone });
    assert(/^Examples?:$/m.test(explain.stdout), 'idem help explain should show an example');
  });
}
