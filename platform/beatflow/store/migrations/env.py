"""Alembic environment for beatflow's results database. The Store passes an open connection (in
``config.attributes["connection"]``), so migrations run inside the store's own transaction."""

from __future__ import annotations

from alembic import context

from beatflow.store import asset_models  # noqa: F401 - its tables on Base.metadata
from beatflow.store.models import Base
from beatflow.store.schema import VERSION_TABLE

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "beatflow migrations run through the store: use `beatflow db upgrade`, not `alembic`"
    )

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
