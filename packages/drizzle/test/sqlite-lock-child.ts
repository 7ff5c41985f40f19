/**
 * Another process holding SQLite's write lock (hardening.test.ts, and the example's):
 * `node --import tsx sqlite-lock-child.ts <file>` opens the file in WAL mode, takes the write
 * lock (`BEGIN IMMEDIATE`), prints `locked`, and holds it until a line arrives on stdin; then it
 * commits, prints `released` and exits.
 */
import { createInterface } from 'node:readline';
import Database from 'better-sqlite3';

const client = new Database(process.argv[2]!);
client.pragma('journal_mode = WAL');
client.exec('BEGIN IMMEDIATE');
process.stdout.write('locked\n');
const lines = createInterface({ input: process.stdin });
lines.once('line', () => {
  client.exec('COMMIT');
  client.close();
  process.stdout.write('released\n');
  lines.close();
});
