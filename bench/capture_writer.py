#!/usr/bin/env python3
"""The writer of `scripts/bench.sh capture` (issue 36): SQL on stdout, for a `mariadb`
client reading it, at a fixed rate of changed rows per second or as fast as the client
takes it (--rate 0).

Each transaction changes 40 rows of two tables (bench.sh creates them):
  w1 (id BIGINT PRIMARY KEY, n INT, note VARCHAR(64), written_at DATETIME(6))
  w2 (g INT, id BIGINT, n INT, note VARCHAR(64), written_at DATETIME(6), PRIMARY KEY (g, id)), g = id % 7
per table: a multi-row INSERT of 12 new rows, an UPDATE of 6 rows this writer
inserted 5 of its transactions earlier (n = n + 1), a DELETE of 2 rows it inserted 20
transactions earlier,
every changed row stamped written_at = NOW(6) (the lag's start). Writer w of W uses the
transactions w, w + W, w + 2W, ... so concurrent writers never touch the same rows.
Until --seconds have passed (counted from the first transaction); the rate is kept by
the clock: a writer that fell behind catches up without sleeping, so the rows written
are rate x seconds when the server keeps up (bench.sh counts what was written).
"""
import argparse
import sys
import time

PER_TABLE_INSERT, PER_TABLE_UPDATE, PER_TABLE_DELETE = 12, 6, 2
ROWS_PER_TX = 2 * (PER_TABLE_INSERT + PER_TABLE_UPDATE + PER_TABLE_DELETE)


def match(table: str, rows: list) -> str:
    """The rows by primary key (w2's is (g, id), g = id % 7), as the product matches keys
    (table/sql.cc ColumnSet::MatchKeys): `id IN (...)`; for the composite key a row IN
    list `(g, id) IN ((...), ...)`, or `(g = ? AND id = ?)` for one row."""
    if table == "w1":
        return "id IN (" + ", ".join(str(r) for r in rows) + ")"
    if len(rows) == 1:
        return f"(g = {rows[0] % 7} AND id = {rows[0]})"
    return "(g, id) IN (" + ", ".join(f"({r % 7}, {r})" for r in rows) + ")"


def transaction(i: int, writers: int) -> str:
    base = i * PER_TABLE_INSERT
    out = ["BEGIN;"]
    for table, key in (("w1", lambda r: f"{r}"), ("w2", lambda r: f"{r % 7}, {r}")):
        cols = "id" if table == "w1" else "g, id"
        values = ", ".join(f"({key(base + j)}, 0, 'r{base + j}', NOW(6))" for j in range(PER_TABLE_INSERT))
        out.append(f"INSERT INTO {table} ({cols}, n, note, written_at) VALUES {values};")
        if i >= 5 * writers:
            rows = [(i - 5 * writers) * PER_TABLE_INSERT + j for j in range(PER_TABLE_UPDATE)]
            out.append(f"UPDATE {table} SET n = n + 1, written_at = NOW(6) WHERE {match(table, rows)};")
        if i >= 20 * writers:
            rows = [(i - 20 * writers) * PER_TABLE_INSERT + PER_TABLE_INSERT - 1 - j for j in range(PER_TABLE_DELETE)]
            out.append(f"DELETE FROM {table} WHERE {match(table, rows)};")
    out.append("COMMIT;")
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=float, required=True, help="changed rows per second of this writer; 0: no pacing")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--writer", type=int, default=0)
    p.add_argument("--writers", type=int, default=1)
    p.add_argument("--first", type=int, default=0, help="transaction number to start at (a later run goes on)")
    a = p.parse_args()
    tx_per_s = a.rate / ROWS_PER_TX
    start = time.monotonic()
    n = 0
    i = a.first + a.writer
    out = sys.stdout
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= a.seconds:
            break
        if tx_per_s > 0:
            ahead = n / tx_per_s - elapsed
            if ahead > 0:
                out.flush()
                time.sleep(min(ahead, 0.05))
                continue
        out.write(transaction(i, a.writers))
        n += 1
        i += a.writers
        if tx_per_s > 0 or n % 8 == 0:
            out.flush()
    out.flush()
    sys.stderr.write(f"writer {a.writer}: {n} transactions, {n * ROWS_PER_TX} statement rows, next {i}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
