"""Opening the store: external servers by URL, and a clear error when pgvector is missing."""

from __future__ import annotations

import io
import os
import random
import string
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from citeline.engine import Citeline
from citeline.errors import ExtensionMissingError, StoreError
from citeline.jobs.submit import Upload
from citeline.settings import Settings
from citeline.store.catalog import DocumentQuery
from citeline.store.database import MIGRATIONS, ensure_pgvector, schema_name
from citeline.store.server import embedded_url
from tests.conftest import write


def test_external_mode_uses_the_given_url(data_dir: Path, tmp_path: Path) -> None:
    # A server we started ourselves, reached only through its postgresql:// URL, as a user's would be.
    url = embedded_url(data_dir).replace("postgresql+psycopg://", "postgresql://", 1)
    settings = Settings(
        data_dir=tmp_path / "files-only", database_url=url, namespace=f"x_{uuid.uuid4().hex[:8]}"
    )
    with Citeline(settings) as cl:
        cl.ingest([write(tmp_path / "a.txt", "External servers hold the catalog too.")])
        assert cl.search("external catalog")[0].document_name == "a.txt"
        assert cl.stats()["mode"] == "external"
        with cl.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema_name(settings.namespace)}" CASCADE'))
    assert not (tmp_path / "files-only" / "pg").exists()  # no embedded server was started there


def test_unreachable_server_is_a_store_error(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url="postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(
        StoreError, match=r"cannot reach PostgreSQL at postgresql\+psycopg://nobody@127\.0\.0\.1:1"
    ):
        Citeline(settings).engine  # noqa: B018


def test_missing_pgvector_is_explained(data_dir: Path) -> None:
    engine = sa.create_engine(embedded_url(data_dir))
    with engine.connect() as conn:
        # Ask as if the server had no such extension: a database where the name is hidden.
        conn.execute(sa.text("CREATE TEMP VIEW pg_available_extensions AS SELECT 'x'::name AS name"))
        conn.execute(sa.text("CREATE TEMP VIEW pg_extension AS SELECT 'x'::name AS extname"))
        conn.execute(sa.text("SET search_path = pg_temp, pg_catalog"))
        with pytest.raises(ExtensionMissingError, match="does not have the pgvector extension"):
            ensure_pgvector(conn, engine)
    engine.dispose()


def test_a_chunks_vector_stays_in_its_row_and_its_text_moves_out(cl: Citeline, tmp_path: Path) -> None:
    # Searches compute distances from the table: a vector moved to the TOAST table costs a lookup each.
    # Words of random letters: text that does not compress, so rows stay over the 2 kB threshold.
    rng = random.Random(7)
    text = " ".join("".join(rng.choices(string.ascii_lowercase, k=7)) for _ in range(400))
    cl.ingest([write(tmp_path / "pump.txt", text)])

    with cl.engine.connect() as conn:
        storage = conn.execute(
            sa.text(
                "SELECT attstorage FROM pg_attribute WHERE attrelid = 'chunks'::regclass "
                "AND attname = 'embedding'"
            )
        ).scalar_one()
        chunks, vectors_out, texts_out = conn.execute(
            sa.text(
                "SELECT count(*), count(pg_column_toast_chunk_id(embedding)), "
                "count(pg_column_toast_chunk_id(text)) FROM chunks"
            )
        ).one()
    assert storage == "m"
    assert chunks > 0 and vectors_out == 0
    assert texts_out > 0, "the rows were over the TOAST threshold: something had to move out"


def _backend_pid(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def test_a_pooled_connection_the_server_dropped_while_idle_is_replaced_unseen(cl: Citeline) -> None:
    # As after a server restart: the pool's connection is gone, the next user must not see it.
    pid = _backend_pid(cl.engine)
    with sa.create_engine(embedded_url(cl.settings.data_dir)).connect() as admin:
        assert admin.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
    assert _backend_pid(cl.engine) != pid
    assert cl.stats()["chunks"] == 0


def test_stats_count_postings_exactly_and_estimate_them_past_a_large_number(
    cl: Citeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from citeline.store import catalog

    write(tmp_path / "a.md", "The relief valve opens at 6 bar and is tested every year by the engineer.")
    cl.ingest([tmp_path])
    with cl.engine.connect() as conn:
        exact = int(conn.execute(sa.text("SELECT count(*) FROM postings")).scalar_one())
    assert cl.stats()["keyword_postings"] == exact > 0  # never analyzed: counted

    # Past the threshold (here, any number), the planner's estimate is given, not a count of every row:
    # after ANALYZE of a table this small, the estimate is the count, and a row added since is not in it.
    monkeypatch.setattr(catalog, "POSTINGS_COUNTED_UP_TO", 0)
    with cl.engine.begin() as conn:
        conn.execute(sa.text("ANALYZE postings"))
    write(tmp_path / "b.md", "Drain the boiler before winter so that frost cannot crack the casing.")
    cl.ingest([tmp_path])
    assert cl.stats()["keyword_postings"] == exact


def test_letting_go_of_the_server_warns_of_nothing_where_xdg_runtime_dir_is_unset(tmp_path: Path) -> None:
    # The first thing a test run (and a `citeline serve` stopping) may do with the wheel is let go of a
    # server; its import warned "XDG_RUNTIME_DIR is not set" under root, where that variable is unset.
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    (tmp_path / "pg").mkdir()  # a data folder whose server is not running: nothing to let go of
    code = (
        "from pathlib import Path; from citeline.store.server import release_embedded; "
        f"release_embedded(Path({str(tmp_path)!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr


def test_documents_stored_before_added_at_take_their_oldest_version_s_time(cl: Citeline) -> None:
    """Migration 0024 fills ``added_at`` from each document's oldest surviving version, on all its
    versions; the next version copies it."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["schema"] = schema_name(cl.settings.namespace)
    with cl.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0023")
        for doc, versions in (("a", (1, 2, 3)), ("b", (1,))):
            document_id = uuid.uuid5(uuid.NAMESPACE_URL, doc)
            for v in versions:
                conn.execute(
                    sa.text(
                        "INSERT INTO documents (id, document_id, name, source_uri, version, status, "
                        "created_at) VALUES (gen_random_uuid(), :d, :n, :s, :v, 'failed', "
                        "timestamptz '2024-01-01 00:00+00' + make_interval(days => :v + :o))"
                    ),
                    {
                        "d": document_id,
                        "n": f"{doc}.md",
                        "s": f"upload-key:{doc}.md",
                        "v": v,
                        "o": 10 * (doc == "b"),
                    },
                )
        command.upgrade(cfg, "head")
        added = conn.execute(
            sa.text(
                "SELECT name, version, to_char(added_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') "
                "FROM documents ORDER BY 1, 2"
            )
        ).all()
    assert [tuple(r) for r in added] == [
        ("a.md", 1, "2024-01-02"),
        ("a.md", 2, "2024-01-02"),
        ("a.md", 3, "2024-01-02"),
        ("b.md", 1, "2024-01-12"),
    ]
    cl.submit(Upload("a.md", io.BytesIO(b"# A\n\nA new version.")), source="a.md", index=False)
    [current] = cl.list_documents(DocumentQuery(source="a.md")).documents
    assert (current.version, current.added_at.date().isoformat()) == (4, "2024-01-02")
