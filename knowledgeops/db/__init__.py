"""The application database (SQLAlchemy 2, Alembic migrations): `database` opens the engine;
each table module (events, audit, task list, webhook cursors, catalogue, live versions, review
cards) holds its table and the store built on `Database`."""
