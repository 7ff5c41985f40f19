/**
 * The payments example (examples/payments) as an OS process: spawned the way `npm start`
 * runs it (`node --import tsx examples/payments/src/main.ts`, cwd the repository root), with
 * its port read from the `[payments] listening on …` line and every `[idem] {json}` line kept
 * as an event. A fleet kills whatever it started (call `killAll()` in `afterAll`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';

export const REPOSITORY_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const EXAMPLE_MAIN = 'examples/payments/src/main.ts';
const LISTENING = /^\[payments\] listening on http:\/\/localhost:(\d+)\b/;
/** As long as a hook may take (vitest.config.ts): on a loaded machine a start (node + tsx) can take 30 s. */
const DEFAULT_START_TIMEOUT_MS = 60_000;

/** One `[idem] {json}` line, parsed. Dates arrive as ISO strings. */
export interface LoggedEvent {
  type: string;
  scope: string;
  key: string;
  [field: string]: unknown;
}

export interface ExampleOptions {
  /** `file:<path>` or `postgres://…`. */
  databaseUrl: string;
  /** IDEM_LEASE, e.g. `2s`. Defaults to the example's (30s). */
  lease?: string;
  /** IDEM_TTL. Defaults to the example's (24h). */
  ttl?: string;
  /** CHANNEL_DELAY_MS. Defaults to 0. */
  channelDelayMs?: number;
  /** IDEM_ATOMIC=1 (PostgreSQL only): the ledger row commits with the claim and the outcome. Defaults to off. */
  atomic?: boolean;
  /** A name for messages. */
  name?: string;
  /** More environment variables (IDEM_SWEEP_EVERY, DATABASE_DRIVER, …). */
  env?: Record<string, string>;
}

export interface ExampleServer {
  readonly name: string;
  readonly pid: number;
  /** `http://127.0.0.1:<port>`: the tests stay on loopback. */
  readonly url: string;
  /** Every stdout and stderr line so far, in order. */
  readonly lines: readonly string[];
  /** Every `[idem]` event so far. */
  readonly events: readonly LoggedEvent[];
  /** Resolves with the first event (already logged or to come) that matches, or rejects after `timeoutMs`. */
  waitForEvent(match: (event: LoggedEvent) => boolean, timeoutMs?: number): Promise<LoggedEvent>;
  /**
   * Resolves once every `[idem]` line the server wrote before this call has been read into
   * `events`. The lines come through a pipe that this process reads in its own time, so an HTTP
   * answer can arrive before the lines the server wrote ahead of it (a CI run counted 360 of 500
   * `waited` events right after the 500 answers). How: a `POST /v1/payments` without a key is
   * refused (400, nothing runs) and logged as an `unkeyed` event; Linux writes stdout pipes
   * synchronously and in order, so once that line is read, every earlier one is.
   */
  settled(timeoutMs?: number): Promise<void>;
  /** Kills the process (SIGKILL unless told otherwise) and resolves once it has exited. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  readonly exited: boolean;
}

/** Every child still running, killed if the test process exits without `killAll()` (a crashed worker). */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export class ExampleFleet {
  readonly #children = new Set<ChildProcess>();

  /** Starts one server and resolves once it listens; rejects (and kills it) if it exits or stays silent. */
  async start(options: ExampleOptions): Promise<ExampleServer> {
    const name = options.name ?? `payments#${this.#children.size + 1}`;
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PORT: '0',
      DATABASE_URL: options.databaseUrl,
      CHANNEL_DELAY_MS: String(options.channelDelayMs ?? 0),
      IDEM_LEASE: options.lease ?? '',
      IDEM_TTL: options.ttl ?? '',
      IDEM_ATOMIC: options.atomic ? '1' : '',
      ...options.env,
    };
    const child = spawn(process.execPath, ['--import', 'tsx', EXAMPLE_MAIN], {
      cwd: REPOSITORY_ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.#children.add(child);
    running.add(child);
    const exit = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    void exit.then(() => {
      this.#children.delete(child);
      running.delete(child);
    });

    const lines: string[] = [];
    const events: LoggedEvent[] = [];
    const listeners = new Set<(event: LoggedEvent) => void>();
    let onListening: ((port: number) => void) | undefined;
    createInterface({ input: child.stdout! }).on('line', (line) => {
      lines.push(line);
      const listening = LISTENING.exec(line);
      if (listening) onListening?.(Number(listening[1]));
      if (!line.startsWith('[idem] ')) return;
      const event = JSON.parse(line.slice('[idem] '.length)) as LoggedEvent;
      events.push(event);
      for (const listener of listeners) listener(event);
    });
    createInterface({ input: child.stderr! }).on('line', (line) => lines.push(line));

    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new Error(
              `[reliability] ${name} did not start within ${DEFAULT_START_TIMEOUT_MS} ms:\n${lines.join('\n')}`,
            ),
          ),
        DEFAULT_START_TIMEOUT_MS,
      );
      onListening = (found) => {
        clearTimeout(timer);
        resolve(found);
      };
      void exit.then(() => {
        clearTimeout(timer);
        reject(
          new Error(`[reliability] ${name} exited before listening (code ${child.exitCode}):\n${lines.join('\n')}`),
        );
      });
    }).catch(async (error: unknown) => {
      child.kill('SIGKILL');
      await exit;
      throw error;
    });

    const waitForEvent: ExampleServer['waitForEvent'] = (match, timeoutMs = 10_000) => {
      const found = events.find(match);
      if (found) return Promise.resolve(found);
      return new Promise<LoggedEvent>((resolve, reject) => {
        const listener = (event: LoggedEvent) => {
          if (!match(event)) return;
          clearTimeout(timer);
          listeners.delete(listener);
          resolve(event);
        };
        const timer = setTimeout(() => {
          listeners.delete(listener);
          reject(
            new Error(
              `[reliability] ${name}: no matching [idem] event within ${timeoutMs} ms; saw ${JSON.stringify(events.map((event) => event.type))}`,
            ),
          );
        }, timeoutMs);
        listeners.add(listener);
      });
    };

    return {
      name,
      pid: child.pid!,
      url: `http://127.0.0.1:${port}`,
      lines,
      events,
      get exited() {
        return child.exitCode !== null || child.signalCode !== null;
      },
      waitForEvent,
      async settled(timeoutMs = 10_000) {
        const before = events.filter((event) => event.type === 'unkeyed').length;
        const marker = waitForEvent(
          () => events.filter((event) => event.type === 'unkeyed').length > before,
          timeoutMs,
        );
        const answer = await fetch(`http://127.0.0.1:${port}/v1/payments`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: 'Bearer acct_settle' },
          body: JSON.stringify({ amount: 1, currency: 'EUR' }),
        });
        await answer.arrayBuffer();
        if (answer.status !== 400)
          throw new Error(`[reliability] ${name}: the settle request was answered ${answer.status}, not 400`);
        await marker;
      },
      async kill(signal = 'SIGKILL') {
        if (child.exitCode === null && child.signalCode === null) child.kill(signal);
        await exit;
      },
    };
  }

  /** SIGKILLs every process this fleet started that is still running, and waits for them. */
  async killAll(): Promise<void> {
    const running = [...this.#children];
    await Promise.all(
      running.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once('exit', () => resolve());
            child.kill('SIGKILL');
          }),
      ),
    );
  }
}
