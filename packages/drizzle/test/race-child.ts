/**
 * One contender of the cross-process race (race.test.ts). Run as
 * `node --import tsx race-child.ts '<json RaceChildConfig>'`: opens its own connection(s),
 * prints `ready`, waits for a start time on stdin, fires its claims at once, and prints one
 * JSON line of what it saw.
 */
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import pg from 'pg';
import mysql from 'mysql2/promise';
import { drizzle } from 'drizzle-orm/node-postgres';
import { drizzle as drizzleMysql } from 'drizzle-orm/mysql2';
import type { IdempotencyStore } from '@idem/core';
import { createDrizzleStore } from '../src/index.ts';
import { openSqliteConnection } from './sqlite-target.ts';

export interface RaceChildConfig {
  target: { dialect: 'sqlite'; file: string } | { dialect: 'postgres' | 'mysql'; url: string; connections: number };
  scope: string;
  key: string;
  claims: number;
}

export interface RaceChildReport {
  claimed: number;
  existing: number;
  /** Tokens owning the record as each claim saw it (the winner's own, or the one it found). */
  owners: string[];
  generations: number[];
  errors: string[];
  /** Epoch ms when this process sent its first claim and when its last answer came back. */
  window: [number, number];
}

/** How long each process keeps claiming after the start time. */
const SPREAD_MS = 100;

const config = JSON.parse(process.argv[2] ?? '{}') as RaceChildConfig;
let close: () => Promise<void>;
let store: IdempotencyStore;
if (config.target.dialect === 'sqlite') {
  const { client, db } = openSqliteConnection(config.target.file);
  store = createDrizzleStore(db);
  close = async () => void client.close();
} else if (config.target.dialect === 'mysql') {
  const pool = mysql.createPool({ uri: config.target.url, connectionLimit: config.target.connections });
  const connections = await Promise.all(Array.from({ length: config.target.connections }, () => pool.getConnection()));
  for (const connection of connections) connection.release();
  store = createDrizzleStore(drizzleMysql(pool));
  close = () => pool.end();
} else {
  const pool = new pg.Pool({ connectionString: config.target.url, max: config.target.connections });
  // Open every connection before the start signal so the claims race, not the handshakes.
  const clients = await Promise.all(Array.from({ length: config.target.connections }, () => pool.connect()));
  for (const client of clients) client.release();
  store = createDrizzleStore(drizzle(pool));
  close = () => pool.end();
}
await store.ping();

const lines = createInterface({ input: process.stdin });
process.stdout.write('ready\n');
const startAt = await new Promise<number>((resolve) => lines.once('line', (line) => resolve(Number(line))));
lines.close();
// Sleep most of the way, then spin: timers fire late by a few ms, more than a SQLite batch takes.
await new Promise((resolve) => setTimeout(resolve, Math.max(0, startAt - Date.now() - 20)));
while (Date.now() < startAt);

const report: RaceChildReport = { claimed: 0, existing: 0, owners: [], generations: [], errors: [], window: [Date.now(), 0] };
const claim = async () => {
  try {
    const result = await store.claim({
      scope: config.scope,
      key: config.key,
      fingerprint: 'race',
      token: randomUUID(),
      leaseMs: 60_000,
      retentionMs: 60_000,
      expiredReuse: 'execute',
    });
    report[result.outcome]++;
    report.owners.push(result.record.token);
    report.generations.push(result.record.generation);
  } catch (error) {
    report.errors.push(String(error));
  }
};
// A burst of claims from every process at the start time, the rest spread over SPREAD_MS, so
// that each process is still claiming while the others are even when the scheduler (or
// SQLite's single writer) lets one process run ahead.
const burst = Math.ceil(config.claims / 4);
const step = SPREAD_MS / (config.claims - burst + 1);
await Promise.all(
  Array.from({ length: config.claims }, (_, i) => (i < burst ? claim() : new Promise((resolve) => setTimeout(resolve, (i - burst + 1) * step)).then(claim))),
);
report.window[1] = Date.now();
await close();
process.stdout.write(`${JSON.stringify(report)}\n`);
