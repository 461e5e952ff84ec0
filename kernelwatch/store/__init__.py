"""KernelWatch's results store: SQLAlchemy models, Alembic migrations, ingest/export, queries.

Import submodules directly (``kernelwatch.store.artifact`` needs no SQLAlchemy; the collector writes artifacts
on machines that lack it).
"""
