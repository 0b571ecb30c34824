"""A namespace backed up into one file and restored: into a new data directory (its own embedded
PostgreSQL), under its own name or another, and refused wherever it would overwrite something."""

from __future__ import annotations

import asyncio
import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from citeline.access import Role
from citeline.chat.session import ChatSession, conversations
from citeline.cli import app, exit_on_sigterm
from citeline.engine import Citeline
from citeline.errors import ConflictError, InvalidRequestError, NotFoundError, StoreError
from citeline.ingest import IngestOptions
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings
from citeline.store import backup as backup_module
from citeline.store.backup import MANIFEST, backup, read_manifest, restore
from citeline.store.database import head_revision, schema_name
from tests.conftest import own_data_dir, write

SHARED_PDFS = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "pdfs"


@pytest.fixture
def stocked(cl: Citeline, tmp_path: Path) -> Citeline:
    """A namespace with a scoped Markdown file, a universal PDF, one API key and one conversation."""
    notes = write(tmp_path / "src" / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar.\n")
    cl.ingest([notes], IngestOptions(scopes=("plant",)))
    cl.ingest([next(SHARED_PDFS.glob("*.pdf"))])
    cl.create_key(Role.READER, ["plant"], name="plant reader")

    async def turn() -> None:
        async for _ in ChatSession.start(cl, llm=None).ask("At what pressure does the relief valve open?"):
            pass

    asyncio.run(turn())
    return cl


@pytest.fixture
def elsewhere(settings: Settings) -> Iterator[Settings]:
    """Settings for another data directory, same namespace."""
    with own_data_dir() as path:
        yield settings.model_copy(update={"data_dir": path})


def _view(cl: Citeline) -> dict[str, object]:
    """What a user of the namespace sees: documents, a scoped search's hits, keys, conversations."""
    hits = cl.search(SearchRequest("relief valve pressure", top_k=3))
    return {
        "documents": sorted((d.name, d.version, d.status, d.scopes) for d in cl.documents()),
        "hits": [(h.document_name, h.page, h.text) for h in hits],
        "keys": [(k.name, k.role, k.scopes) for k in cl.api_keys()],
        "conversations": [c.title for c in conversations(cl)],
    }


def test_a_backup_restored_in_a_new_data_directory_serves_what_the_original_served(
    stocked: Citeline, elsewhere: Settings, tmp_path: Path
) -> None:
    made = backup(stocked.settings, tmp_path / "plant.tar")
    assert made.manifest.documents == 2 and made.manifest.files == 2 and made.manifest.keys == 1
    assert made.manifest.conversations == 1 and made.manifest.missing_files == []
    assert read_manifest(made.path) == made.manifest

    done = restore(elsewhere, made.path)
    assert done.namespace == stocked.settings.namespace and done.files_added == 2
    with Citeline(elsewhere) as copy:
        assert _view(copy) == _view(stocked)
        # The originals moved with it: each version's path is in the new data directory, and readable.
        for doc in copy.documents():
            path = copy.document_file(doc)
            assert path.is_relative_to(copy.files_dir)
            assert path.read_bytes() == stocked.document_file(stocked.document(str(doc.id))).read_bytes()
        # And so can be built from again: a re-ingest reads them (a missing original is refused).
        copy.start_jobs()
        for doc in copy.documents():
            copy.reingest(doc.id)
            rebuilt = copy.wait(doc.id)
            assert (rebuilt.version, rebuilt.status) == (2, "completed"), rebuilt.error


def test_a_restore_under_another_namespace_name_takes_that_name(
    stocked: Citeline, elsewhere: Settings, tmp_path: Path
) -> None:
    made = backup(stocked.settings, tmp_path / "plant.tar")
    renamed = elsewhere.model_copy(update={"namespace": stocked.settings.namespace + "_copy"})
    done = restore(renamed, made.path)
    assert done.namespace == renamed.namespace and done.manifest.namespace == stocked.settings.namespace
    with Citeline(renamed) as copy:
        assert _view(copy) == _view(stocked)
        with copy.engine.connect() as conn:
            schemas = set(conn.execute(sa.text("SELECT nspname FROM pg_namespace")).scalars())
        assert (
            schema_name(renamed.namespace) in schemas
            and schema_name(stocked.settings.namespace) not in schemas
        )


def test_a_restore_never_overwrites_a_namespace_that_holds_anything(
    stocked: Citeline, settings: Settings, tmp_path: Path
) -> None:
    made = backup(stocked.settings, tmp_path / "plant.tar")
    before = _view(stocked)
    with pytest.raises(
        ConflictError, match=r"namespace '.*' is not empty \(2 documents, 1 API key, 1 conversation\)"
    ):
        restore(settings, made.path)
    # Under another name in the same database, the backup's own schema is in the way.
    with pytest.raises(ConflictError, match="also exists in this database"):
        restore(settings.model_copy(update={"namespace": settings.namespace + "_copy"}), made.path)
    assert _view(stocked) == before


def test_a_refused_restore_counts_documents_as_stats_does_not_their_versions(
    stocked: Citeline, settings: Settings, tmp_path: Path
) -> None:
    made = backup(stocked.settings, tmp_path / "plant.tar")
    stocked.start_jobs()
    # The cited Markdown file re-ingested: its first version stays, kept for the conversation's citation.
    doc = next(d for d in stocked.documents() if d.name == "valves.md")
    stocked.reingest(doc.id)
    assert stocked.wait(doc.id).version == 2
    counted = stocked.stats()
    assert (counted["documents"], counted["versions"]) == (2, 3)
    with pytest.raises(ConflictError, match=r"not empty \(2 documents, 1 API key, 1 conversation\)"):
        restore(settings, made.path)


def test_an_empty_namespace_is_replaced_by_the_restore(
    stocked: Citeline, elsewhere: Settings, tmp_path: Path
) -> None:
    made = backup(stocked.settings, tmp_path / "plant.tar")
    with Citeline(elsewhere) as empty:  # opened once: the schema exists, holding nothing
        assert empty.documents() == []
    restore(elsewhere, made.path)
    with Citeline(elsewhere) as copy:
        assert len(copy.documents()) == 2


def test_a_backup_never_replaces_a_file_and_names_what_is_wrong(
    stocked: Citeline, settings: Settings, tmp_path: Path
) -> None:
    taken = write(tmp_path / "taken.tar", "mine")
    with pytest.raises(ConflictError, match=r"taken\.tar already exists"):
        backup(settings, taken)
    assert taken.read_text() == "mine"
    with pytest.raises(NotFoundError, match=r"folder .*nowhere does not exist"):
        backup(settings, tmp_path / "nowhere" / "b.tar")
    with pytest.raises(NotFoundError, match="namespace 'never_made' does not exist") as missing:
        backup(settings.model_copy(update={"namespace": "never_made"}), tmp_path / "b.tar")
    # It names the namespaces there are, as every command refusing a missing one does.
    assert re.search(rf"\(namespaces: [a-z0-9_, ]*\b{settings.namespace}\b", str(missing.value))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tar")) == ["taken.tar"]


def test_what_is_not_a_backup_is_refused_before_anything_changes(
    stocked: Citeline, elsewhere: Settings, tmp_path: Path
) -> None:
    with pytest.raises(NotFoundError, match="no backup file"):
        restore(elsewhere, tmp_path / "missing.tar")
    with pytest.raises(InvalidRequestError, match="not a citeline backup"):
        restore(elsewhere, write(tmp_path / "notes.tar", "just text"))
    made = backup(stocked.settings, tmp_path / "plant.tar")

    def rewritten(
        name: str,
        manifest: dict[str, object] | None,
        dump: bytes | None,
        extra: str | None = None,
        damaged: bool = False,
    ) -> Path:
        path = tmp_path / name
        with tarfile.open(made.path) as src, tarfile.open(path, "w") as out:
            if extra is not None:
                out.addfile(tarfile.TarInfo(extra), io.BytesIO())
            for member in src.getmembers():
                data = src.extractfile(member)
                if member.name == MANIFEST and manifest is not None:
                    payload = json.dumps(manifest).encode()
                elif member.name == "database.dump" and dump is not None:
                    payload = dump
                elif member.name.startswith("files/") and damaged and data is not None:
                    payload = data.read()[:-1] + b"!"  # one byte changed since it was stored
                else:
                    out.addfile(member, data)
                    continue
                member.size = len(payload)
                out.addfile(member, io.BytesIO(payload))
        return path

    manifest = json.loads(json.dumps(made.manifest.__dict__))
    with pytest.raises(InvalidRequestError, match="format 99, newer than this citeline reads"):
        restore(elsewhere, rewritten("newer.tar", {**manifest, "format": 99}, None))
    # Named by schema revision, this citeline's too: both were citeline 0.1.0, so naming the versions
    # said "made by citeline 0.1.0 ..., which this citeline (0.1.0) does not know".
    future = rewritten("future.tar", {**manifest, "revision": "9999"}, None)
    with pytest.raises(InvalidRequestError) as refused:
        restore(elsewhere, future)
    assert str(refused.value) == (
        f"{future} was made at schema revision 9999, which this citeline (schema {head_revision()}) "
        "does not know: a newer citeline made it; upgrade citeline first"
    )
    with pytest.raises(StoreError, match=r"cannot restore .*broken\.tar: pg_restore failed"):
        restore(elsewhere, rewritten("broken.tar", None, b"PGDMP but not really"))
    # A hand-edited manifest: its values are checked before the restore acts on any of them.
    incomplete = {k: v for k, v in manifest.items() if k not in ("revision", "chunks")}
    with pytest.raises(InvalidRequestError, match=r"incomplete \(no revision, chunks\)"):
        restore(elsewhere, rewritten("incomplete.tar", incomplete, None))
    with pytest.raises(InvalidRequestError, match="malformed files_dir, documents"):
        restore(elsewhere, rewritten("typed.tar", {**manifest, "documents": "2", "files_dir": 7}, None))
    with pytest.raises(InvalidRequestError, match="names namespace 'x\"; DROP SCHEMA"):
        restore(elsewhere, rewritten("named.tar", {**manifest, "namespace": 'x"; DROP SCHEMA public'}, None))
    with pytest.raises(
        InvalidRequestError,
        match=r"edited: its citeline-backup\.json names the schema citeline_other, its database\.dump holds",
    ):
        restore(elsewhere, rewritten("renamed.tar", {**manifest, "namespace": "other"}, None))
    with pytest.raises(InvalidRequestError, match=r"refusing 'files/\.\./\.\./x', outside the folder"):
        restore(elsewhere, rewritten("escape.tar", None, None, extra="files/../../x"))
    # An original whose bytes no longer hash to its name: refused, and the restored database undone.
    with pytest.raises(InvalidRequestError, match=r"damaged: files/.* does not hold the bytes its name is"):
        restore(elsewhere, rewritten("flipped.tar", None, None, damaged=True))
    folder = tmp_path / "backups.tar"
    folder.mkdir()
    with pytest.raises(InvalidRequestError, match=r"backups\.tar is a folder, not a backup file"):
        restore(elsewhere, folder)
    # Nothing was restored by any of them, and the folder of originals is untouched.
    with Citeline(elsewhere) as empty:
        assert empty.documents() == [] and not any(empty.files_dir.rglob("*"))


def test_the_cli_backs_up_and_restores_and_says_what_it_moved(settings: Settings, tmp_path: Path) -> None:
    def run(data_dir: Path, namespace: str, *args: str) -> tuple[int, str, str]:
        result = CliRunner().invoke(app, ["--data-dir", str(data_dir), "--namespace", namespace, *args])
        return result.exit_code, " ".join(result.stdout.split()), " ".join(result.stderr.split())

    ns, here = settings.namespace, settings.data_dir
    notes = write(tmp_path / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar.\n")
    try:
        assert run(here, ns, "ingest", str(notes))[0] == 0
        with own_data_dir() as there:
            code, out, _ = run(here, ns, "backup", str(tmp_path / "b.tar"))
            assert code == 0 and out.startswith(f"backed up namespace {ns} to {tmp_path / 'b.tar'} (")
            assert out.endswith(
                "1 document (1 version, 1 chunk), 0 API keys, 0 conversations, 1 stored original"
            )
            code, _, err = run(here, ns, "backup", str(tmp_path / "b.tar"))
            assert code == 3 and "b.tar already exists; give a new file name" in err

            code, out, _ = run(there, "copied", "restore", str(tmp_path / "b.tar"), "--json")
            assert code == 0
            got = json.loads(out)
            assert (got["namespace"], got["restored_into"], got["documents"]) == (ns, "copied", 1)
            code, out, _ = run(there, "copied", "search", "relief valve", "--json")
            assert code == 0 and [h["document_name"] for h in json.loads(out)] == ["valves.md"]
            code, _, err = run(there, "copied", "restore", str(tmp_path / "b.tar"))
            assert code == 3 and "namespace 'copied' is not empty (1 document)" in err
    finally:
        with Citeline(settings) as cl, cl.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(ns)}" CASCADE'))


def test_a_restore_that_fails_writing_the_originals_leaves_the_namespace_empty(
    stocked: Citeline, elsewhere: Settings, tmp_path: Path
) -> None:
    made = backup(stocked.settings, tmp_path / "plant.tar")
    # Where the folder of originals should be, a file: no original can be written.
    blocker = write(elsewhere.data_dir / "files", "not a folder")
    with pytest.raises(StoreError, match=r"cannot restore .*plant\.tar: cannot write .*/files/"):
        restore(elsewhere, made.path)
    with Citeline(elsewhere) as empty:
        assert empty.documents() == [] and empty.api_keys() == [] and conversations(empty) == []
    # So the same file restores once the cause is gone (a non-empty namespace would be refused).
    blocker.unlink()
    assert restore(elsewhere, made.path).files_added == 2
    with Citeline(elsewhere) as copy:
        assert _view(copy) == _view(stocked)


def test_a_restore_stopped_by_sigterm_leaves_nothing_behind(
    stocked: Citeline, elsewhere: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = backup(stocked.settings, tmp_path / "plant.tar")
    files = backup_module._restore_files

    def stopped_midway(*args: Any) -> None:
        files(*args)  # the originals are written, the namespace restored: then the service stops
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)

    monkeypatch.setattr(backup_module, "_restore_files", stopped_midway)
    with pytest.raises(SystemExit) as stop, exit_on_sigterm():
        restore(elsewhere, made.path)
    assert stop.value.code == 128 + signal.SIGTERM
    with Citeline(elsewhere) as empty:
        assert empty.documents() == [] and not any(p.is_file() for p in empty.files_dir.rglob("*"))


def test_a_backup_stopped_by_sigterm_leaves_no_file_behind(
    stocked: Citeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stopped_midway(*args: Any) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)

    monkeypatch.setattr(backup_module, "_add_files", stopped_midway)
    with pytest.raises(SystemExit), exit_on_sigterm():
        backup(stocked.settings, tmp_path / "plant.tar")
    # Neither the backup nor its dump, half written next to it.
    assert list(tmp_path.iterdir()) == [tmp_path / "src"]


def test_a_backup_that_cannot_write_its_file_says_so(stocked: Citeline, tmp_path: Path) -> None:
    # /proc takes no new files, whoever asks (root as well).
    with pytest.raises(StoreError, match=r"cannot write /proc/plant\.tar: "):
        backup(stocked.settings, Path("/proc/plant.tar"))


def test_a_backup_goes_where_hard_links_are_not_made(
    stocked: Citeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(source: str, target: Path) -> None:  # as on a FAT drive or an SMB share
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    made = backup(stocked.settings, tmp_path / "plant.tar")
    assert read_manifest(made.path) == made.manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plant.tar", "src"]
    with pytest.raises(ConflictError, match="already exists"):
        backup(stocked.settings, tmp_path / "plant.tar")


def test_finding_the_servers_tools_warns_of_nothing_where_xdg_runtime_dir_is_unset() -> None:
    # A restore looks its tools up before any server starts; the wheel's RuntimeDirWarning ("XDG_RUNTIME_DIR
    # is not set") was printed by `citeline restore` under root, where that variable is unset.
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-c",
            "from citeline.store.backup import _tool; print(_tool('pg_dump'))",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("pg_dump") and "Warning" not in done.stderr
