/**
 * The memory run, in a process of its own started with `--expose-gc` (bench/memory.ts): fresh
 * `engine.execute` calls over the Drizzle store, one after the other, with a forced GC and an
 * RSS sample every `sampleEvery` operations after `warmup` operations. Answers the samples over IPC.
 */
import { randomUUID } from 'node:crypto';
import { createEngine, defaultFingerprint } from '@idem/core';
import { createDrizzleStore } from '@idem/drizzle';
import { openDatabase } from '@idem/drizzle/connect';

export interface MemorySample {
  /** Operations after the warm-up. */
  ops: number;
  rssBytes: number;
  heapUsedBytes: number;
  /** What V8 has reserved for its heap: its young generation grows in steps under allocation. */
  heapTotalBytes: number;
}

export interface MemoryRunConfig {
  url: string;
  warmup: number;
  ops: number;
  sampleEvery: number;
}

const config = JSON.parse(process.argv[2] ?? '{}') as MemoryRunConfig;
const collect = (globalThis as { gc?: () => void }).gc;
if (!collect) throw new Error('[bench] run with --expose-gc');

const database = await openDatabase(config.url);
const engine = createEngine({ store: createDrizzleStore(database.db) });
const fingerprint = defaultFingerprint({ amount: 1200, currency: 'EUR' });
let counter = 0;
const execute = () =>
  engine.execute({ scope: `acct_${counter % 100}/payments.create`, key: randomUUID(), fingerprint }, () => ({
    id: `pay_${++counter}`,
    amount: 1200,
    currency: 'EUR',
  }));

const sample = (ops: number): MemorySample => {
  collect();
  const { rss, heapUsed, heapTotal } = process.memoryUsage();
  return { ops, rssBytes: rss, heapUsedBytes: heapUsed, heapTotalBytes: heapTotal };
};

for (let i = 0; i < config.warmup; i++) await execute();
const samples: MemorySample[] = [sample(0)];
for (let done = 0; done < config.ops; ) {
  for (let i = 0; i < config.sampleEvery; i++) await execute();
  done += config.sampleEvery;
  samples.push(sample(done));
}
await engine.drain();
await database.close();
process.send?.(samples);
