"""Alembic environment: runs migrations against the URL given in the config."""

from alembic import context
from sqlalchemy import engine_from_config, pool

from service.db import rollup_tables  # noqa: F401  (registers the rollup tables in the metadata)
from service.db.models import Base

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None:
    # The `alembic` command line (alembic.ini): the database of the settings, as the service would migrate it
    # (TOOLSCOUT_DB__URL, else the SQLite file of the data folder), not a URL of its own.
    from pathlib import Path

    from sqlalchemy.engine import make_url

    from service.db.engine import sync_url
    from service.settings import Settings

    _url = make_url(sync_url(Settings().database_url))
    if _url.get_backend_name() == "sqlite" and _url.database and _url.database != ":memory:":
        Path(_url.database).parent.mkdir(parents=True, exist_ok=True)
    config.set_main_option("sqlalchemy.url", _url.render_as_string(hide_password=False).replace("%", "%%"))


def run_migrations_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    given = config.attributes.get("connection")
    if given is not None:  # upgrade_database's connection, which holds the migration lock
        context.configure(connection=given, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    connectable = engine_from_config(config.get_section(config.config_ini_section, {}),
                                     prefix="sqlalchemy.", poolclass=pool.NullPool)
    with connectable.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
