/**
 * Holds SQLite's write lock on a file from another OS process (`sqlite-lock-child.ts`), as a
 * second server or a maintenance job would, until `release()`.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const CHILD = fileURLToPath(new URL('./sqlite-lock-child.ts', import.meta.url));

export interface HeldLock {
  /** Lets the other process commit; resolves once it has. */
  release(): Promise<void>;
  /** Kills the other process if it is still running. */
  kill(): void;
}

/** Resolves once another process holds the write lock of `file`. */
export async function holdSqliteWriteLock(file: string): Promise<HeldLock> {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, file], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const lines = createInterface({ input: child.stdout });
  const next = () =>
    new Promise<string>((resolve, reject) => {
      lines.once('line', resolve);
      child.once('exit', (code) => reject(new Error(`the lock holder exited (${code}): ${stderr}`)));
    });
  const locked = await next();
  if (locked !== 'locked') throw new Error(`the lock holder said ${locked}`);
  return {
    async release() {
      const released = next();
      child.stdin.end('release\n');
      if ((await released) !== 'released') throw new Error('the lock holder did not release');
    },
    kill() {
      if (child.exitCode === null) child.kill('SIGKILL');
    },
  };
}
