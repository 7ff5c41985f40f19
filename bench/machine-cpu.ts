/**
 * The whole machine's CPU over a run, split by who used it: the server under test (measured by
 * the caller), the database processes (PostgreSQL's backends and background processes, Redis,
 * MariaDB), this process (autocannon, the load generator, runs in it) and the rest (the kernel's
 * loopback networking not charged to a process, anything else running). On a machine of N cores a
 * run that keeps every core busy can do at most N seconds of CPU per second: a variant's machine
 * CPU per request is what bounds its req/s, and the split says whose share a gap is.
 *
 * Linux only (`/proc`); elsewhere every figure is `undefined` and the report leaves them out.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/** Process names (`/proc/<pid>/comm`) counted as the database. */
const DATABASE_PROCESSES = new Set(['postgres', 'redis-server', 'mariadbd', 'mysqld']);

export interface CpuSnapshot {
  /** Every core's busy time (user, nice, system, irq, softirq; steal and idle left out), µs. */
  machine: number;
  /**
   * The database processes' user + system time, their reaped children's included (a PostgreSQL
   * backend that exits is added to the postmaster's), µs.
   */
  database: number;
  /** This process's user + system time, µs. */
  self: number;
}

let ticks: number | undefined;
/** µs per clock tick (`getconf CLK_TCK`, 100 on every Linux this runs on). */
function microsPerTick(): number {
  if (ticks === undefined) {
    try {
      ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticks = 100;
    }
  }
  return 1_000_000 / ticks;
}

/** The snapshot now, or `undefined` where there is no `/proc`. */
export function cpuSnapshot(): CpuSnapshot | undefined {
  let stat: string;
  try {
    stat = readFileSync('/proc/stat', 'utf8');
  } catch {
    return undefined;
  }
  const tick = microsPerTick();
  // cpu  user nice system idle iowait irq softirq steal guest guest_nice (guest is inside user)
  const fields = stat.slice(0, stat.indexOf('\n')).trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0] = fields;
  let database = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const line = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const name = line.slice(line.indexOf('(') + 1, line.lastIndexOf(')'));
      if (!DATABASE_PROCESSES.has(name)) continue;
      // After "pid (comm)": state is field 3; utime, stime, cutime, cstime are fields 14–17.
      const rest = line.slice(line.lastIndexOf(')') + 2).split(' ');
      database += (Number(rest[11]) + Number(rest[12]) + Number(rest[13]) + Number(rest[14])) * tick;
    } catch {
      // The process exited while being read.
    }
  }
  const usage = process.cpuUsage();
  return { machine: (user + nice + system + irq + softirq) * tick, database, self: usage.user + usage.system };
}

/** Per request between two snapshots, µs: the machine, the database, the load generator (this process). */
export interface CpuPerRequest {
  machineCpuMicros: number;
  databaseCpuMicros: number;
  loadCpuMicros: number;
}

export function cpuPerRequest(
  before: CpuSnapshot | undefined,
  after: CpuSnapshot | undefined,
  requests: number,
): CpuPerRequest | undefined {
  if (!before || !after) return undefined;
  const n = Math.max(1, requests);
  return {
    machineCpuMicros: (after.machine - before.machine) / n,
    databaseCpuMicros: (after.database - before.database) / n,
    loadCpuMicros: (after.self - before.self) / n,
  };
}
