// The consumer test's client-only part: a GraphQL client app installs @idem/core and
// @idem/envelop alone and uses `@idem/envelop/client`; npm must pull no server package for it
// (`graphql` and `@envelop/core` are optional peers, needed by the server entry only).
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export async function clientOnlySteps({ work, tarballs, helpers }) {
  const { step, run, assert, log } = helpers;
  await step(
    'a GraphQL client app installs @idem/core and @idem/envelop only: no graphql, no @envelop/core',
    async () => {
      const app = join(work, 'client-app');
      mkdirSync(app);
      const idem = { '@idem/core': tarballs['@idem/core'], '@idem/envelop': tarballs['@idem/envelop'] };
      writeFileSync(
        join(app, 'package.json'),
        JSON.stringify({
          name: 'idem-consumer-client',
          private: true,
          type: 'module',
          dependencies: idem,
          overrides: idem,
        }),
      );
      await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: app });
      for (const server of ['graphql', '@envelop/core', 'graphql-yoga', '@idem/drizzle', 'drizzle-orm'])
        assert(!existsSync(join(app, 'node_modules', server)), `a client-only install should not get ${server}`);
      const { stdout } = await run(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          "const m = await import('@idem/envelop/client'); console.log(typeof m.createIdempotentFetch, typeof m.newIdempotencyKey);",
        ],
        { cwd: app },
      );
      assert(stdout.trim() === 'function function', `@idem/envelop/client should load, got ${stdout}`);
      const server = await run(
        process.execPath,
        [
          '--input-type=module',
          '-e',
          "import('@idem/envelop').then(() => console.log('loaded'), (e) => console.log(e.code))",
        ],
        { cwd: app },
      );
      assert(server.stdout.trim() === 'ERR_MODULE_NOT_FOUND', `the server entry without graphql: ${server.stdout}`);
      log('  @idem/envelop/client loads; the server entry asks for graphql (ERR_MODULE_NOT_FOUND)');
    },
  );
}
