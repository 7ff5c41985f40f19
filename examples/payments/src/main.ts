/**
 * `npm start`: the payments example. Reads its configuration from the environment (see
 * config.ts), applies migrations, serves tRPC at /trpc and GraphQL at /graphql, and sweeps
 * expired keys every 5 minutes unless IDEM_SWEEPER=off (one process of a fleet at a time).
 */
import type { Server } from 'node:http';
import { createDrizzleStore, migrate, startSweeper } from '@idem/drizzle';
import { openDatabase } from '@idem/drizzle/connect';
import { formatDuration, type IdempotencyEvent } from '@idem/core';
import { createPaymentsApp } from './app.ts';
import { createCheckoutServer } from './checkout/server.ts';
import { ConfigError, readConfig } from './config.ts';

function logEvent(event: IdempotencyEvent): void {
  // K5: events carry no payload and no stored body; the error of a storeError is shown by message only.
  const { error, ...rest } = event as IdempotencyEvent & { error?: unknown };
  const line = error === undefined ? rest : { ...rest, error: error instanceof Error ? error.message : String(error) };
  console.log(`[idem] ${JSON.stringify(line)}`);
}

async function main(): Promise<void> {
  const config = readConfig();
  const database = await openDatabase(config.database);
  try {
    await migrate(database.db);
  } catch (error) {
    await database.close().catch(() => {});
    throw new Error(`migrating ${database.description} failed: ${oneLine(error)}`);
  }
  // The checkout page, on its own port (another origin), calls the API: when CORS_ORIGIN is not
  // set, the API allows the page's origin.
  let apiPort = config.port;
  const checkout =
    config.checkoutPort === undefined
      ? undefined
      : await createCheckoutServer({ apiUrl: () => config.checkoutApiUrl ?? `http://localhost:${apiPort}` });
  const checkoutPort = checkout ? await listen(checkout, config.checkoutPort!) : undefined;
  const corsOrigins =
    config.corsOrigins.length > 0 || checkoutPort === undefined
      ? config.corsOrigins
      : [`http://localhost:${checkoutPort}`, `http://127.0.0.1:${checkoutPort}`];
  const app = createPaymentsApp({
    db: database.db,
    retentionMs: config.retentionMs,
    leaseMs: config.leaseMs,
    waitMs: config.waitMs,
    channelDelayMs: config.channelDelayMs,
    atomic: config.atomic,
    maxBodyBytes: config.maxBodyBytes,
    corsOrigins,
    adminToken: config.adminToken,
    groupCommit: config.groupCommit,
    semantics: config.semantics,
    onEvent: logEvent,
  });
  await app.channel.migrate();
  // A clean stop on SIGTERM/SIGINT from the moment the port is announced: the handlers are in place
  // before the server listens (Linux writes stdout pipes synchronously, so a supervisor can read
  // the "listening" line and signal before the next statement runs).
  let sweeper: ReturnType<typeof startSweeper> | undefined;
  const shutdown = async () => {
    app.server.close();
    checkout?.close();
    await sweeper?.stop();
    await app.drain();
    await database.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown());
  process.once('SIGTERM', () => void shutdown());
  const port = await listen(app.server, config.port);
  apiPort = port;
  console.log(
    `[payments] listening on http://localhost:${port} (tRPC /trpc, GraphQL /graphql, policy /idempotency) — store ${database.description}`,
  );
  if (checkoutPort !== undefined)
    console.log(
      `[payments] checkout page on http://localhost:${checkoutPort} (calls ${config.checkoutApiUrl ?? `http://localhost:${port}`})`,
    );
  console.log(
    config.semantics === 'v2'
      ? '[payments] IDEM_SEMANTICS=v2: a payment that fails with a 5xx after it started is resumed by a retry with the same key (Stripe v2)'
      : '[payments] IDEM_SEMANTICS=v1: a payment that fails after it started is stored and replayed (Stripe v1; IDEM_SEMANTICS=v2 resumes it)',
  );
  if (corsOrigins.length > 0) console.log(`[payments] CORS: browsers on ${corsOrigins.join(', ')} may call the API`);
  if (config.adminToken !== undefined)
    console.log(
      `[payments] admin: http://localhost:${port}/admin/timeline?scope=<account>/payments.create&key=<key> (ADMIN_TOKEN)`,
    );

  // R3: archive expired keys on a schedule; in a fleet only one process sweeps at a time.
  sweeper =
    config.sweepEveryMs === undefined
      ? undefined
      : startSweeper(createDrizzleStore(database.db), {
          every: config.sweepEveryMs,
          onRound: (round) => {
            if (round.skipped) console.log('[payments] sweep skipped: another process is sweeping');
            else if (round.archived > 0) console.log(`[payments] swept ${round.archived} expired keys`);
          },
          onError: (error) => console.error(`[payments] sweep failed: ${oneLine(error)}`),
        });
  if (config.sweepEveryMs !== undefined)
    console.log(
      `[payments] sweeping expired keys every ${formatDuration(config.sweepEveryMs)} (IDEM_SWEEPER=off turns it off)`,
    );
}

function listen(server: Server, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, () => {
      const address = server.address();
      resolve(typeof address === 'object' && address ? address.port : port);
    });
  });
}

/**
 * What went wrong, on one line: drizzle's "Failed query: …" wrapper (a multi-line query dump)
 * gives way to its cause, e.g. `connect ECONNREFUSED 127.0.0.1:5432`.
 */
function oneLine(error: unknown): string {
  let current = error;
  for (let depth = 0; depth < 8; depth++) {
    const message = current instanceof Error ? current.message : String(current);
    // node-postgres rejects with an AggregateError (empty message) when every address refused.
    const inner = (current as { errors?: unknown }).errors;
    const text =
      message ||
      (Array.isArray(inner)
        ? inner.map((each) => (each instanceof Error ? each.message : String(each))).join('; ')
        : '');
    const cause = (current as { cause?: unknown }).cause;
    if ((text === '' || text.startsWith('Failed query:')) && cause !== undefined && cause !== null) {
      current = cause;
      continue;
    }
    return text.split('\n')[0]!.trim() || 'unknown error';
  }
  return 'unknown error';
}

main().catch((error: unknown) => {
  const reason = error instanceof ConfigError ? error.message : oneLine(error);
  console.error(`[payments] cannot start: ${reason}`);
  process.exit(1);
});
