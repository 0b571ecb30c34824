"""Alembic environment: run by citeline itself, with a connection bound to the namespace's schema."""

from __future__ import annotations

from alembic import context

from citeline.store.models import Base

connection = context.config.attributes["connection"]
schema = context.config.attributes["schema"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table_schema=schema,
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
