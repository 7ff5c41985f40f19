#!/usr/bin/env bash
# The database's own limit for idem's fresh path (issue 24): pgbench running the store's two
# statements — the claim's INSERT … ON CONFLICT DO NOTHING RETURNING and the completion's
# UPDATE … WHERE owner RETURNING — as one pair per simulated request, prepared (-M prepared, as
# the store prepares them), at 1 and 64 clients, on the migrated tables in a fresh schema
# (dropped at the end); then the store's grouped forms of the same two statements, 16 and 64
# requests per statement (GROUP_SIZES; empty skips them), at 4 and 8 clients. Compare its
# pairs/s and grouped requests/s with the fresh req/s of `npm run bench -- --only http`.
#
#   bash bench/pgbench.sh                 # DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test)
#   SECONDS_PER_RUN=10 bash bench/pgbench.sh
set -euo pipefail
url="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
seconds="${SECONDS_PER_RUN:-5}"
here="$(cd "$(dirname "$0")" && pwd)"
schema="idem_pgbench_$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
work="$(mktemp -d)"
cleanup() {
  psql "$url" -q -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

psql "$url" -q -v ON_ERROR_STOP=1 -c "CREATE SCHEMA $schema"
for migration in "$here"/../packages/drizzle/migrations/postgres/*.sql; do
  { echo "SET search_path TO $schema;"; cat "$migration"; } | psql "$url" -q -v ON_ERROR_STOP=1 >/dev/null
done

# The store's statements (packages/drizzle/src/pg/statements.ts: claimInsert, completeUpdate), with the values a request binds.
cat >"$work/pair.sql" <<'SQL'
\set lease 30000
\set retention 86400000
INSERT INTO idem_keys (scope, key, generation, fingerprint, state, token, created_at, lease_until, expires_at, completed_at, archived_at, takeovers, outcome_kind, outcome_status, body)
  VALUES ('bench', gen_random_uuid()::text, 1, 'fingerprint', 'processing', gen_random_uuid()::text,
          date_trunc('milliseconds', now()),
          date_trunc('milliseconds', now()) + :lease::double precision * interval '1 millisecond',
          date_trunc('milliseconds', now()) + :retention::double precision * interval '1 millisecond',
          NULL, NULL, 0, NULL, NULL, NULL)
  ON CONFLICT (scope, key) DO NOTHING
  RETURNING key AS k, token AS t \gset
UPDATE idem_keys SET state = 'completed', completed_at = date_trunc('milliseconds', statement_timestamp()),
    expires_at = date_trunc('milliseconds', statement_timestamp()) + (expires_at - created_at),
    outcome_kind = 'success', outcome_status = 200, body = '{"id":"charge"}'
  WHERE scope = 'bench' AND key = :k AND token = :t AND state = 'processing'
  RETURNING token;
SQL

# Busy clock ticks of the whole machine (user, nice, system, irq, softirq) and of PostgreSQL's
# processes with their reaped children (a backend that exits is added to the postmaster's):
# "machine database". pgbench itself is the rest.
cpu_ticks() {
  local machine database
  machine="$(awk '/^cpu /{print $2 + $3 + $4 + $7 + $8; exit}' /proc/stat)"
  database="$(cat /proc/[0-9]*/stat 2>/dev/null | awk '$2 == "(postgres)" {sum += $14 + $15 + $16 + $17} END {print sum + 0}')"
  echo "$machine $database"
}
tick_micros=$((1000000 / $(getconf CLK_TCK)))
# "machine (database)" µs of CPU per request between two cpu_ticks readings, over REQUESTS requests.
cpu_per_request() {
  local before=($1) after=($2) requests=$3
  printf '%.0f (%.0f)' "$(echo "(${after[0]} - ${before[0]}) * $tick_micros / $requests" | bc -l)" \
    "$(echo "(${after[1]} - ${before[1]}) * $tick_micros / $requests" | bc -l)"
}

options="-c search_path=$schema"
for clients in 1 64; do
  threads=$((clients < 2 ? 1 : 2))
  before="$(cpu_ticks)"
  out="$(PGOPTIONS="$options" pgbench "$url" -n -M prepared -f "$work/pair.sql" -c "$clients" -j "$threads" -T "$seconds" 2>&1)" || {
    echo "$out" >&2
    exit 1
  }
  after="$(cpu_ticks)"
  tps="$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')"
  latency="$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')"
  done_count="$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')"
  printf '| pgbench, claim INSERT + completion UPDATE | %s | %.0f pairs/s | %s ms avg | %s |\n' "$clients" "$tps" "$latency" \
    "$(cpu_per_request "$before" "$after" "$done_count")"
done

# The grouped ceiling (issue 34): the store's own claim group and completion group statements
# (pgbench-groups.ts captures them from the store), SIZE requests per statement, each statement
# its own commit. The store sends each as a named prepared statement with one array parameter per
# column (unnest); pgbench cannot bind arrays, so here they are literals (-M simple), parsed each
# time: the ceiling is a little lower than the store's own statements could reach. CLIENTS pgbench clients
# stand for the batcher's lanes: 4 claim and 4 completion statements in flight at most.
group_sizes="${GROUP_SIZES:-16 64}"
if [ -n "$group_sizes" ]; then
  # shellcheck disable=SC2086
  (cd "$here/.." && node --import tsx bench/pgbench-groups.ts "$work" $group_sizes) >/dev/null
  for size in $group_sizes; do
    for clients in 4 8; do
      before="$(cpu_ticks)"
      out="$(PGOPTIONS="$options" pgbench "$url" -n -M simple -f "$work/group-$size.sql" -c "$clients" -j 2 -T "$seconds" 2>&1)" || {
        echo "$out" >&2
        exit 1
      }
      after="$(cpu_ticks)"
      tps="$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')"
      latency="$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')"
      done_count="$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')"
      printf '| pgbench, claim group + completion group, %s requests per statement | %s | %.0f requests/s (%.0f groups/s) | %s ms avg per group | %s |\n' \
        "$size" "$clients" "$(echo "$tps * $size" | bc -l)" "$tps" "$latency" \
        "$(cpu_per_request "$before" "$after" "$((done_count * size))")"
    done
  done
fi
# Every pair and group completed its own claims: no row is left processing.
left="$(psql "$url" -Atc "SELECT count(*) FILTER (WHERE state <> 'completed') || ' of ' || count(*) FROM $schema.idem_keys")"
echo "rows not completed: $left" >&2
