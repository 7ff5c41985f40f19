/**
 * Part 4, memory: RSS over 100,000 fresh mutations through the engine (Drizzle store, SQLite
 * and PostgreSQL) after a 50,000-operation warm-up, sampled every 10,000 operations after a
 * forced GC, in a fresh process so that earlier parts do not weigh on it. "Flat" means RSS grew
 * less than 10% from the first sample after warm-up to the last. The warm-up and the V8 flag
 * below take the two bounded fills out of the measurement (better-sqlite3's page cache, V8's
 * new space); the second-half growth and the heap slope still tell any rest from a leak.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { openBenchPostgres, openBenchSqlite } from './databases.ts';
import { slope } from './measure.ts';
import type { MemoryRunConfig, MemorySample } from './memory-process.ts';
import type { Target } from './floor.ts';

export interface MemoryOptions {
  quick: boolean;
  stores: ReadonlyArray<'sqlite' | 'postgres'>;
}

export interface MemoryResult {
  store: 'sqlite' | 'postgres';
  warmup: number;
  ops: number;
  samples: Array<{ ops: number; rssMiB: number; heapUsedMiB: number; heapTotalMiB: number }>;
  /** RSS from the first sample to the last, as a share of the first. */
  rssGrowth: number;
  /** The same over the second half of the run only (SQLite's page cache and V8's young generation fill during the first). */
  rssGrowthSecondHalf: number;
  /** Least-squares slope of RSS, MiB per 10,000 operations. */
  rssSlopeMiBPer10k: number;
  heapSlopeMiBPer10k: number;
  target: Target;
}

const ENTRY = fileURLToPath(new URL('./memory-process.ts', import.meta.url));
const MIB = 1024 * 1024;
/**
 * The warm-up fills what is bounded by design before the first sample: better-sqlite3's page
 * cache (16 MB by default) holds the newest pages of the table and its indexes, ≈ 350 bytes
 * per fresh mutation here, so it is full after ≈ 45,000 of them.
 */
const WARMUP_OPS = 50_000;
/**
 * V8 grows its new space in steps under a steady allocation rate, up to 16 MiB per semi-space
 * on this machine; the run starts it there (`--min-semi-space-size`), so that a step V8 would
 * take anyway (once, at a moment of its choosing) does not land inside the measurement.
 */
const SEMI_SPACE_MIB = 16;

export async function runMemory({ quick, stores }: MemoryOptions): Promise<MemoryResult[]> {
  const results: MemoryResult[] = [];
  for (const store of stores) {
    const database = store === 'sqlite' ? await openBenchSqlite() : await openBenchPostgres();
    try {
      const url = database.dialect === 'sqlite' ? `file:${database.file}` : database.url;
      const config: MemoryRunConfig = {
        url,
        warmup: quick ? 2000 : WARMUP_OPS,
        ops: quick ? 20_000 : 100_000,
        sampleEvery: quick ? 2000 : 10_000,
      };
      const samples = await runChild(config);
      const first = samples[0]!;
      const last = samples[samples.length - 1]!;
      const xs = samples.map((s) => s.ops / 10_000);
      const rssGrowth = (last.rssBytes - first.rssBytes) / first.rssBytes;
      const middle = samples[Math.floor((samples.length - 1) / 2)]!;
      results.push({
        store,
        warmup: config.warmup,
        ops: config.ops,
        samples: samples.map((s) => ({
          ops: s.ops,
          rssMiB: s.rssBytes / MIB,
          heapUsedMiB: s.heapUsedBytes / MIB,
          heapTotalMiB: s.heapTotalBytes / MIB,
        })),
        rssGrowth,
        rssGrowthSecondHalf: (last.rssBytes - middle.rssBytes) / middle.rssBytes,
        rssSlopeMiBPer10k: slope(
          xs,
          samples.map((s) => s.rssBytes / MIB),
        ),
        heapSlopeMiBPer10k: slope(
          xs,
          samples.map((s) => s.heapUsedBytes / MIB),
        ),
        target: { ratio: 1 + rssGrowth, atMost: 1.1, met: rssGrowth < 0.1 },
      });
    } finally {
      await database.close();
    }
  }
  return results;
}

function runChild(config: MemoryRunConfig): Promise<MemorySample[]> {
  const child = fork(ENTRY, [JSON.stringify(config)], {
    execArgv: ['--expose-gc', `--min-semi-space-size=${SEMI_SPACE_MIB}`, '--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    let samples: MemorySample[] | undefined;
    child.once('message', (message) => {
      samples = message as MemorySample[];
    });
    child.once('exit', (code) =>
      samples ? resolve(samples) : reject(new Error(`[bench] the memory run exited with ${code}`)),
    );
  });
}
