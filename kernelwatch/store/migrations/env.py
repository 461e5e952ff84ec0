"""Alembic environment: runs on the connection handed over by ``kernelwatch.store.engine.upgrade``."""

from alembic import context
from sqlalchemy import create_engine

from kernelwatch.store.models import Base

config = context.config
connection = config.attributes.get("connection")

if connection is None:  # `alembic` run by hand: take the URL from the config
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
        context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
