/**
 * What the @idem/fetch suites share: the stores they run on (one `describe.each`, never copies) —
 * @idem/drizzle on a SQLite file and on PostgreSQL (a fresh schema at DATABASE_URL; PGlite when
 * no server answers, unless IDEM_REQUIRE_POSTGRES=1) — a gate that holds handlers while a test
 * sends a duplicate, and requests as the suites send them.
 */
import type { IdempotencyStore } from '@idem/core';
import { createDrizzleStore, migrate } from '@idem/drizzle';
import { openPostgresTarget } from '../../drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../drizzle/test/sqlite-target.ts';

export interface StoreTarget {
  name: string;
  open(): Promise<{ store: IdempotencyStore; close(): Promise<void> }>;
}

export const sqliteTarget: StoreTarget = {
  name: 'SQLite',
  async open() {
    const target = await openSqliteTarget();
    await migrate(target.db);
    return { store: createDrizzleStore(target.db), close: () => target.close() };
  },
};

export const postgresTarget: StoreTarget = {
  name: 'PostgreSQL',
  async open() {
    const target = await openPostgresTarget({ schemaPrefix: 'idem_fetch_test' });
    await migrate(target.db);
    return { store: createDrizzleStore(target.db), close: () => target.close() };
  },
};

export const STORE_TARGETS = [sqliteTarget, postgresTarget];

/** Holds handlers while closed; resolves `whenWaiting(n)` once n handlers wait at it. */
export class Gate {
  #open = true;
  #release: Array<() => void> = [];
  #watchers: Array<{ count: number; resolve: () => void }> = [];
  waiting = 0;

  close(): void {
    this.#open = false;
  }

  open(): void {
    this.#open = true;
    const release = this.#release;
    this.#release = [];
    for (const resolve of release) resolve();
  }

  async pass(): Promise<void> {
    if (this.#open) return;
    this.waiting++;
    for (const watcher of this.#watchers.filter((w) => this.waiting >= w.count)) watcher.resolve();
    await new Promise<void>((resolve) => this.#release.push(resolve));
    this.waiting--;
  }

  whenWaiting(count = 1): Promise<void> {
    if (this.waiting >= count) return Promise.resolve();
    return new Promise<void>((resolve) => this.#watchers.push({ count, resolve }));
  }
}

/** A POST with a JSON body (or a string body as it is) and an optional `Idempotency-Key`. */
export function post(
  url: string,
  {
    key,
    body,
    headers = {},
    method = 'POST',
  }: { key?: string; body?: unknown; headers?: Record<string, string>; method?: string } = {},
): Request {
  const all = new Headers(headers);
  if (key !== undefined) all.set('idempotency-key', key);
  let payload: string | undefined;
  if (typeof body === 'string') payload = body;
  else if (body !== undefined) {
    payload = JSON.stringify(body);
    if (!all.has('content-type')) all.set('content-type', 'application/json');
  }
  return new Request(url, { method, headers: all, ...(payload === undefined ? {} : { body: payload }) });
}

/** The parts of a response a test compares: status, headers, and the body's bytes. */
export async function read(response: Response): Promise<{
  status: number;
  headers: Headers;
  bytes: Buffer;
  text: string;
  json: any;
  replayed: boolean;
}> {
  const bytes = Buffer.from(await response.arrayBuffer());
  const text = bytes.toString('utf8');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return {
    status: response.status,
    headers: response.headers,
    bytes,
    text,
    json,
    replayed: response.headers.get('idempotent-replayed') === 'true',
  };
}
