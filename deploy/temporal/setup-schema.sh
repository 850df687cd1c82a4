#!/bin/sh
# One-shot: the Temporal server's databases and schema on PostgreSQL (idempotent: a second run
# finds them and only applies missing schema versions).
set -eu
: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${SQL_PASSWORD:?}"
tool() { temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -u "$POSTGRES_USER" -p "${DB_PORT:-5432}" "$@"; }
schema=/etc/temporal/schema/postgresql/v12
for db in temporal temporal_visibility; do
  tool --db "$db" create || true  # exists already on a second run
done
tool --db temporal setup-schema -v 0.0 || true
tool --db temporal update-schema -d "$schema/temporal/versioned"
tool --db temporal_visibility setup-schema -v 0.0 || true
tool --db temporal_visibility update-schema -d "$schema/visibility/versioned"
echo "Temporal schema is up to date"
