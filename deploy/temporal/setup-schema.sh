#!/bin/sh
# One-shot: the Temporal server's databases and schema on PostgreSQL, safe to run again with no
# error hidden. Each step leaves what exists alone (temporal-sql-tool of admin-tools 1.30.1, as
# its source reads): `create-database` takes PostgreSQL's "already exists" (42P04) as done;
# `setup-schema -v 0.0` creates the version tables only if missing and records 0.0 only where
# no later version is recorded; `update-schema` applies only the versions above the recorded
# one, nothing at the head. So a second run passes, and every failure is a real one
# (PostgreSQL unreachable, a wrong password, a migration that failed) and stops the job: the
# server, which waits for it to complete, never starts on a half-made schema. No `-q`: it makes
# the tool exit 0 on errors. The image has no psql to ask PostgreSQL first, and needs none.
set -eu
: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${SQL_PASSWORD:?}"
tool() { temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -u "$POSTGRES_USER" -p "${DB_PORT:-5432}" "$@"; }
# The schema files ship in admin-tools: its version must be the server's.
schema=/etc/temporal/schema/postgresql/v12
for db in temporal temporal_visibility; do
  tool --db "$db" create-database
done
tool --db temporal setup-schema -v 0.0
tool --db temporal update-schema -d "$schema/temporal/versioned"
tool --db temporal_visibility setup-schema -v 0.0
tool --db temporal_visibility update-schema -d "$schema/visibility/versioned"
echo "Temporal schema is up to date"
