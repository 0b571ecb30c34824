"""Chroma behind the :class:`~citeline.store.index.VectorIndex` protocol: embedded, server or cloud.

The catalog in PostgreSQL keeps everything but the vectors (text, labels, what is active); Chroma keeps
each vector under its chunk id, with its version id as metadata.

**Layout: each namespace and model has one collection of all its vectors, and one per scope partition.**
A document's partition is its set of scopes (universal documents share one); each vector is held twice,
in the model's whole collection and in its partition's. An unscoped search is one query of the whole
collection. A scoped search queries, unfiltered, only the partitions of the documents its filters keep
(resolved by the catalog, so every filter kind counts), merges them by distance and keeps chunks of the
allowed versions; when the filter keeps so much of the corpus that querying its partitions one by one
would cost more than asking the whole collection for proportionally more hits, it asks the whole
collection instead. Querying every partition for an unscoped search cost about as many times one query
as there are partitions (bench/chroma.py), which the whole collection avoids, at twice the storage.
Chroma's own ``where`` filters are never used on the search path: at 100k vectors here they cost 100 to
500 times an unfiltered query whatever their selectivity, and reading metadata with each hit several
times its price, so hits are checked against the catalog instead. Vectors move between partitions when
a document's scopes change (:meth:`ChromaIndex.relabelled`).
"""

from __future__ import annotations

import hashlib
import math
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray
from pydantic import SecretStr

from citeline.errors import ConfigError, StoreError
from citeline.settings import Settings
from citeline.store.index import EmbedFn, HeldChunks, Repair, VectorQuery, VersionVectors
from citeline.types import counted, embedding_text

#: Ids read or written per Chroma call (its batch limit is larger; this keeps requests small).
_PAGE = 5_000
#: Extra room asked of Chroma over what the filter's share of the corpus predicts.
_SLACK = 1.5
#: Seconds a readiness probe waits for a Chroma server or Chroma Cloud, and keeps its answer (whatever
#: the kind: an embedded Chroma's folder is looked at as often).
_HEARTBEAT_TIMEOUT = 2.0
HEARTBEAT_TTL = 2.0
#: Where chromadb's CloudClient goes unless told otherwise.
CLOUD_HOST, CLOUD_PORT = "api.trychroma.com", 443
#: The file embedded Chroma keeps its database in, in its folder.
_EMBEDDED_DATABASE = "chroma.sqlite3"


@dataclass(frozen=True)
class ClientSpec:
    """Which Chroma client to open, and with what (the API key stays secret in logs and reprs).

    For ``cloud``, ``host``, ``port`` and ``ssl`` default to Chroma Cloud's own address (tests point them
    at a local server)."""

    kind: Literal["embedded", "server", "cloud"]
    path: Path | None = None
    host: str | None = None
    port: int | None = None
    ssl: bool = False
    api_key: SecretStr | None = None
    tenant: str | None = None
    database: str | None = None


def client_spec(settings: Settings) -> ClientSpec:
    """The client the settings ask for: a server at ``chroma_url``; else Chroma Cloud when an API key
    is set; else embedded in the data directory."""
    tenant, database = settings.chroma_tenant, settings.chroma_database
    if settings.chroma_url:
        url = urlsplit(settings.chroma_url)
        if not url.hostname:
            raise ConfigError(f"chroma_url {settings.chroma_url!r} names no host")
        ssl = url.scheme == "https"
        return ClientSpec(
            "server",
            host=url.hostname,
            port=url.port or (443 if ssl else 8000),
            ssl=ssl,
            api_key=settings.chroma_api_key,
            tenant=tenant,
            database=database,
        )
    if settings.chroma_api_key is not None:
        return ClientSpec("cloud", api_key=settings.chroma_api_key, tenant=tenant, database=database)
    path = settings.data_dir.expanduser().resolve() / "chroma"
    return ClientSpec("embedded", path=path, tenant=tenant, database=database)


def _connect(spec: ClientSpec) -> Any:
    try:
        import chromadb
    except ImportError as exc:
        raise ConfigError(
            "CITELINE_VECTOR_BACKEND=chroma needs the chromadb package: pip install 'citeline[chroma]'"
        ) from exc
    from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT
    from chromadb.config import Settings as ChromaSettings

    # Nothing reaches the network unless the user configured it: no usage reports.
    quiet = ChromaSettings(anonymized_telemetry=False)
    tenant, database = spec.tenant or DEFAULT_TENANT, spec.database or DEFAULT_DATABASE
    if spec.kind == "embedded":
        assert spec.path is not None
        spec.path.mkdir(parents=True, exist_ok=True)
        return chromadb.PersistentClient(
            path=str(spec.path), settings=quiet, tenant=tenant, database=database
        )
    if spec.kind == "server":
        headers = {"x-chroma-token": spec.api_key.get_secret_value()} if spec.api_key else None
        return chromadb.HttpClient(
            host=spec.host or "localhost",
            port=spec.port or 8000,
            ssl=spec.ssl,
            headers=headers,
            settings=quiet,
            tenant=tenant,
            database=database,
        )
    assert spec.api_key is not None
    # The cloud resolves an unset tenant and database from the key.
    return chromadb.CloudClient(
        tenant=spec.tenant,
        database=spec.database,
        api_key=spec.api_key.get_secret_value(),
        settings=quiet,
        cloud_host=spec.host or CLOUD_HOST,
        cloud_port=spec.port or CLOUD_PORT,
        enable_ssl=spec.ssl if spec.host else True,
    )


def _unreachable(exc: BaseException) -> bool:
    """Whether Chroma's failure is that its server could not be reached (rather than a refused call)."""
    import httpx

    if isinstance(exc, httpx.TransportError):
        return True
    # chromadb's HttpClient checks the server when it is made, and says so only in a ValueError.
    return isinstance(exc, ValueError) and "Could not connect to a Chroma server" in str(exc)


#: The partition of universal documents (no scopes).
UNIVERSAL = "u"
#: The collection of all of a model's vectors, whatever their partition (never a partition's name: those
#: are ``UNIVERSAL`` or 12 hex digits).
WHOLE = "all"


def collection_name(namespace: str, model: str, partition: str = UNIVERSAL) -> str:
    """The collection of one namespace's vectors of one model and scope partition (or ``WHOLE``): vector
    spaces never share a collection."""
    return f"{_prefix(namespace)}{hashlib.sha1(model.encode()).hexdigest()[:12]}_{partition}"


def _prefix(namespace: str) -> str:
    return f"citeline_{namespace}_"


def partition(scopes: Sequence[str]) -> str:
    """The partition of a document with these scopes: its set of scopes, as a short stable name."""
    if not scopes:
        return UNIVERSAL
    return hashlib.sha1("\n".join(sorted(set(scopes))).encode()).hexdigest()[:12]


class ChromaIndex:
    """Vectors in Chroma, partitioned by scopes; see the module's docstring."""

    name: ClassVar[str] = "chroma"
    in_rows: ClassVar[bool] = False

    def __init__(self, spec: ClientSpec, *, namespace: str, ef_search: int) -> None:
        self.spec = spec
        self.namespace = namespace
        self.ef_search = ef_search
        self._client: Any = None
        self._collections: dict[str, Any] = {}
        self._lock = threading.Lock()
        #: When the server's heartbeat was last asked, and what it said (see :meth:`problem`).
        self._heartbeat: tuple[float, str | None] | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> ChromaIndex:
        return cls(client_spec(settings), namespace=settings.namespace, ef_search=settings.hnsw_ef_search)

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock, self._errors("connect"):
                if self._client is None:
                    self._client = _connect(self.spec)
        return self._client

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Chroma's failures as :class:`StoreError` (a job retries them), saying where it failed."""
        try:
            yield
        except (StoreError, ConfigError):
            raise
        except Exception as exc:
            where = {"embedded": str(self.spec.path), "cloud": "Chroma Cloud"}.get(
                self.spec.kind, f"{self.spec.host}:{self.spec.port}"
            )
            if _unreachable(exc):
                raise StoreError(
                    f"Chroma ({self.spec.kind}, {where}) is unreachable: failed to {action}: {exc}"
                ) from exc
            raise StoreError(f"Chroma ({self.spec.kind}, {where}) failed to {action}: {exc}") from exc

    def _collection(self, model: str, part: str, dimension: int | None = None) -> Any:
        """A partition's collection; created when ``dimension`` is given, else None if it does not exist."""
        name = collection_name(self.namespace, model, part)
        held = self._collections.get(name)
        if held is not None:
            return held
        if dimension is None:
            from chromadb.errors import NotFoundError

            # Only Chroma's word that the collection does not exist means "no vectors yet": a server out
            # of reach must fail the search, not answer it with nothing.
            try:
                found = self.client.get_collection(name)
            except NotFoundError:
                return None
        else:
            found = self.client.get_or_create_collection(
                name,
                configuration={"hnsw": {"space": "cosine", "ef_search": self.ef_search}},
                metadata={"citeline_model": model, "partition": part},
            )
        self._collections[name] = found
        return found

    def _namespace_collections(self) -> list[Any]:
        out = []
        for listed in self.client.list_collections():
            name = listed.name if hasattr(listed, "name") else str(listed)
            if name.startswith(_prefix(self.namespace)):
                out.append(self._collections.get(name) or self.client.get_collection(name))
        return out

    def prepare(self, conn: sa.Connection, model: str, dimension: int) -> None:
        with self._errors(f"prepare the collections of {model}"):
            self._collection(model, WHOLE, dimension)

    def add(self, conn: sa.Connection, model: str, batch: Sequence[VersionVectors]) -> None:
        if not any(len(part.chunk_ids) for part in batch):
            return
        parts = _partitions(conn, [part.version_id for part in batch])
        grouped: dict[str, list[tuple[str, str, NDArray[np.float32]]]] = {}
        for part in batch:
            # A version the catalog no longer holds goes to the universal partition; repair removes it.
            target = grouped.setdefault(parts.get(part.version_id, UNIVERSAL), [])
            target.extend(
                (str(cid), str(part.version_id), vec)
                for cid, vec in zip(part.chunk_ids, part.vectors, strict=True)
            )
        with self._errors(f"add {counted(sum(len(g) for g in grouped.values()), 'vector')}"):
            for name, rows in grouped.items():
                dimension = int(rows[0][2].shape[0])
                self._upsert(self._collection(model, name, dimension), rows)
                self._upsert(self._collection(model, WHOLE, dimension), rows)

    @staticmethod
    def _upsert(collection: Any, rows: Sequence[tuple[str, str, NDArray[np.float32]]]) -> None:
        for at in range(0, len(rows), _PAGE):
            page = rows[at : at + _PAGE]
            collection.upsert(
                ids=[r[0] for r in page],
                embeddings=np.stack([r[2] for r in page]),
                metadatas=[{"version": r[1]} for r in page],
            )

    def remove(self, conn: sa.Connection, version_ids: Sequence[uuid.UUID]) -> None:
        if not version_ids:
            return
        where = {"version": {"$in": [str(v) for v in version_ids]}}
        with self._errors(f"remove the vectors of {counted(len(version_ids), 'version')}"):
            for collection in self._namespace_collections():
                collection.delete(where=where)

    def warm_up(self, conn: sa.Connection, model: str, dimension: int) -> None:
        """Nothing to load: the Chroma server holds the vectors."""

    def held(self, query: VectorQuery, chunk_ids: Sequence[int]) -> HeldChunks | None:
        """None: the Chroma server holds the vectors, and the catalog the rest."""
        return None

    def relabelled(self, conn: sa.Connection, version_ids: Sequence[uuid.UUID]) -> None:
        """Move the vectors of versions whose scopes changed to their new partition."""
        if not version_ids:
            return
        parts = _partitions(conn, version_ids)
        rows = conn.execute(
            sa.text(
                "SELECT c.id, c.document_id, c.embedding_model FROM chunks c "
                "WHERE c.document_id = ANY(CAST(:ids AS uuid[])) AND c.embedding IS NULL"
            ),
            {"ids": list(version_ids)},
        ).all()
        wanted: dict[str, tuple[str, str]] = {
            str(cid): (model, parts[version]) for cid, version, model in rows if version in parts
        }
        with self._errors(f"move the vectors of {counted(len(version_ids), 'relabelled version')}"):
            self._refile(wanted)

    def _refile(self, wanted: dict[str, tuple[str, str]]) -> int:
        """Move each chunk id of ``wanted`` found outside its (model, partition) there; returns how many."""
        moved = 0
        if not wanted:
            return moved
        ids = list(wanted)
        for collection in self._namespace_collections():
            meta = collection.metadata or {}
            if meta.get("partition") == WHOLE:
                continue  # holds every partition's vectors: nothing in it is misplaced
            here = (meta.get("citeline_model"), meta.get("partition"))
            misplaced = [i for i in ids if wanted[i] != here]
            for at in range(0, len(misplaced), _PAGE):
                got = collection.get(ids=misplaced[at : at + _PAGE], include=["embeddings", "metadatas"])
                if not got["ids"]:
                    continue
                by_target: dict[tuple[str, str], list[tuple[str, str, NDArray[np.float32]]]] = {}
                for i, vec, m in zip(got["ids"], got["embeddings"], got["metadatas"], strict=True):
                    row = (i, str((m or {}).get("version", "")), np.asarray(vec, dtype=np.float32))
                    by_target.setdefault(wanted[i], []).append(row)
                for (model, part), rows in by_target.items():
                    self._upsert(self._collection(model, part, int(rows[0][2].shape[0])), rows)
                collection.delete(ids=list(got["ids"]))
                moved += len(got["ids"])
        return moved

    def search(
        self, conn: sa.Connection, query: VectorQuery, *, ran: list[str] | None = None
    ) -> list[tuple[int, float]]:
        if ran is not None:
            ran.append(self.name)  # Chroma plans its own search: only its name is citeline's to report
        scope = query.scope
        if scope is not None and (not scope.document_ids or scope.chunk_ids == []):
            return []
        # Hits asked of each collection per result wanted: more from the whole collection for a filter
        # that keeps only part of it.
        share = 1.0
        parts = [WHOLE]
        if scope is not None:
            allowed = "c.document_id = ANY(CAST(:allowed AS uuid[]))"
            bind: dict[str, Any] = {"allowed": list(scope.document_ids)}
            if scope.chunk_ids is not None:
                # Chunk-level filters (model number, section type) chose these chunks of those documents.
                allowed, bind["allowed"] = "c.id = ANY(CAST(:allowed AS bigint[]))", list(scope.chunk_ids)
            parts = sorted(set(_partitions(conn, scope.document_ids).values()))
            share = max(scope.chunks, 1) / max(scope.corpus_chunks, scope.chunks, 1)
            # A query's cost grows with the hits asked (past ef_search): asking the whole collection for
            # 1/share times more costs about 1/share queries, against one query per partition.
            if 1 / share < len(parts):
                parts = [WHOLE]
            else:
                share = 1.0
        else:
            allowed = (
                "c.document_id IN (SELECT id FROM documents WHERE is_active AND embedding_model = :m "
                "AND vector_index = :vi)"
            )
            bind = {"m": query.model, "vi": self.name}
        with self._errors("search"):
            collections = [c for c in (self._collection(query.model, p) for p in parts) if c is not None]
            want = {id(c): math.ceil(query.limit * _SLACK / share) for c in collections}
            found: dict[int, float] = {}
            # The farthest distance each collection returned, for those that may hold more.
            horizon: dict[int, float] = {}
            while True:
                for c in collections:
                    got = self._query(c, query.vector, want[id(c)])
                    found.update(got)
                    if len(got) == want[id(c)]:
                        horizon[id(c)] = max(got.values())
                    else:
                        horizon.pop(id(c), None)
                kept = _kept(conn, found, allowed, bind)
                # Exact (as far as each HNSW query is): a collection cut off nearer than the last hit kept
                # may hide a nearer allowed chunk, so it is asked for more.
                last = kept[query.limit - 1][1] if len(kept) >= query.limit else math.inf
                collections = [c for c in collections if horizon.get(id(c), math.inf) < last]
                if not collections:
                    return kept[: query.limit]
                for c in collections:
                    want[id(c)] *= 4

    @staticmethod
    def _query(collection: Any, vector: NDArray[np.float32], n: int) -> dict[int, float]:
        # No count first (a round trip to a server): Chroma returns what it holds when asked for more.
        # Distances only: asking for metadata with the hits costs several times the search itself.
        result = collection.query(query_embeddings=[vector], n_results=n, include=["distances"])
        return {int(i): float(d) for i, d in zip(result["ids"][0], result["distances"][0], strict=True)}

    def vectors(self, conn: sa.Connection, chunk_ids: Sequence[int]) -> dict[int, NDArray[np.float32]]:
        out: dict[int, NDArray[np.float32]] = {}
        if not chunk_ids:
            return out
        rows = conn.execute(
            sa.text("SELECT id, embedding_model FROM chunks WHERE id = ANY(:ids)"), {"ids": list(chunk_ids)}
        ).all()
        by_model: dict[str, list[str]] = {}
        for cid, model in rows:
            by_model.setdefault(model, []).append(str(cid))
        with self._errors(f"read {counted(len(chunk_ids), 'vector')}"):
            for model, ids in by_model.items():
                collection = self._collection(model, WHOLE)
                if collection is not None:
                    out.update(self._read(collection, ids))
        return out

    @staticmethod
    def _read(collection: Any, ids: Sequence[str]) -> dict[int, NDArray[np.float32]]:
        out: dict[int, NDArray[np.float32]] = {}
        for at in range(0, len(ids), _PAGE):
            got = collection.get(ids=list(ids[at : at + _PAGE]), include=["embeddings"])
            for i, vec in zip(got["ids"], got["embeddings"], strict=True):
                out[int(i)] = np.asarray(vec, dtype=np.float32)
        return out

    def repair(self, conn: sa.Connection, model: str, embed: EmbedFn) -> Repair:
        """Remove vectors whose chunk is gone, move vectors filed under old scopes, copy a vector held
        in only one of its two collections into the other, and restore active chunks that have none.

        Chroma's ids are read before the catalog's: a version is activated only after its vectors were
        added, so an active chunk missing from what was read really has no vector (or was added since,
        and is then written again, which changes nothing).
        """
        removed = restored = unrestorable = 0
        with self._errors("repair"):
            whole: set[int] = set()
            parted: set[int] = set()
            for collection in self._namespace_collections():
                ids = self._all_ids(collection)
                existing = set(
                    conn.execute(
                        sa.text("SELECT id FROM chunks WHERE id = ANY(:ids)"), {"ids": sorted(ids)}
                    ).scalars()
                )
                orphans = [str(i) for i in ids - existing]
                for at in range(0, len(orphans), _PAGE):
                    collection.delete(ids=orphans[at : at + _PAGE])
                removed += len(orphans)
                is_whole = (collection.metadata or {}).get("partition") == WHOLE
                (whole if is_whole else parted).update(ids & existing)
            held = whole | parted
            rows = conn.execute(
                sa.text(
                    "SELECT c.id, c.document_id, c.embedding_model, d.scopes, c.text, d.is_active, c.context "
                    "FROM chunks c JOIN documents d ON d.id = c.document_id "
                    "WHERE d.vector_index = :name AND c.embedding IS NULL "
                    "AND (d.is_active OR c.id = ANY(:held))"
                ),
                {"name": self.name, "held": sorted(held)},
            ).all()
            self._refile({str(r[0]): (r[2], partition(r[3])) for r in rows if int(r[0]) in parted})
            # An active chunk's vector belongs in both collections; one held in only one of them (an
            # index older than the whole collections, or a crash between the two writes) is copied.
            halves = [
                r for r in rows if r[5] and int(r[0]) in held and not (r[0] in whole and r[0] in parted)
            ]
            for chunk_model in {r[2] for r in halves}:
                mine = [r for r in halves if r[2] == chunk_model]
                for at in range(0, len(mine), _PAGE):
                    page = mine[at : at + _PAGE]
                    found = self._find(chunk_model, [str(r[0]) for r in page])
                    self.add(
                        conn,
                        chunk_model,
                        [VersionVectors(r[1], [int(r[0])], found[int(r[0])][None, :]) for r in page],
                    )
                restored += len(mine)
            missing = [r for r in rows if r[5] and int(r[0]) not in held]
            todo = [r for r in missing if r[2] == model]
            unrestorable = len(missing) - len(todo)
            for at in range(0, len(todo), _PAGE):
                part = todo[at : at + _PAGE]
                vectors = embed([embedding_text(r[4], r[6]) for r in part])
                self.add(
                    conn,
                    model,
                    [VersionVectors(r[1], [int(r[0])], vectors[i : i + 1]) for i, r in enumerate(part)],
                )
                restored += len(part)
        return Repair(removed=removed, restored=restored, unrestorable=unrestorable)

    def _find(self, model: str, ids: Sequence[str]) -> dict[int, NDArray[np.float32]]:
        """The vectors of ``model`` held for these ids in any of its collections."""
        out: dict[int, NDArray[np.float32]] = {}
        for collection in self._namespace_collections():
            if (collection.metadata or {}).get("citeline_model") != model:
                continue
            out.update(self._read(collection, [i for i in ids if int(i) not in out]))
            if len(out) == len(ids):
                break
        return out

    @staticmethod
    def _all_ids(collection: Any) -> set[int]:
        ids: set[int] = set()
        offset = 0
        while True:
            page = collection.get(include=[], limit=_PAGE, offset=offset)["ids"]
            ids.update(int(i) for i in page)
            if len(page) < _PAGE:
                return ids
            offset += _PAGE

    def problem(self) -> str | None:
        """Why this Chroma cannot serve now, if it cannot; the answer is kept for ``HEARTBEAT_TTL``, so
        probes from several orchestrators cost one look.

        A server must answer its heartbeat, and Chroma Cloud the identity call its client makes to learn
        the key's tenant (which a refused key fails too), within ``_HEARTBEAT_TIMEOUT``: the client
        chromadb makes waits without end on a server that accepts but does not answer. Embedded Chroma
        runs in this process, but holds its database open: a folder deleted or made unwritable under it
        fails later writes, or lets them go to files no one finds again, so its folder is looked at."""
        now = time.monotonic()
        if self._heartbeat is not None and now - self._heartbeat[0] < HEARTBEAT_TTL:
            return self._heartbeat[1]
        if self.spec.kind == "embedded":
            assert self.spec.path is not None
            found = _folder_problem(self.spec.path, opened=self._client is not None)
        elif self.spec.kind == "server":
            found = self._http_problem("/api/v2/heartbeat", "Chroma", "its heartbeat")
        else:
            found = self._http_problem("/api/v2/auth/identity", "Chroma Cloud", "its identity call")
        self._heartbeat = (now, found)
        return found

    def _http_problem(self, path: str, what: str, call: str) -> str | None:
        """Why a GET of ``path`` did not succeed within ``_HEARTBEAT_TIMEOUT``, if it did not."""
        cloud = self.spec.kind == "cloud" and not self.spec.host
        scheme = "https" if self.spec.ssl or cloud else "http"
        where = f"{self.spec.host or CLOUD_HOST}:{self.spec.port or CLOUD_PORT}"
        request = urllib.request.Request(f"{scheme}://{where}{path}")
        if self.spec.api_key is not None:
            request.add_header("x-chroma-token", self.spec.api_key.get_secret_value())
        try:
            with urllib.request.urlopen(request, timeout=_HEARTBEAT_TIMEOUT):
                return None
        except urllib.error.HTTPError as exc:  # a refused key, say
            return f"{what} at {where} answered {call} with HTTP {exc.code} {exc.reason}"
        except (OSError, ValueError) as exc:  # URLError is an OSError; timeouts too
            reason = getattr(exc, "reason", None) or exc
            return f"{what} at {where} does not answer {call}: {reason}"

    def close(self) -> None:
        self._collections.clear()
        self._client = None


def _folder_problem(folder: Path, *, opened: bool) -> str | None:
    """Why embedded Chroma cannot keep what it writes in ``folder``, if it cannot. Its database file is
    missed only once the client has ``opened`` it (a new folder has none until then)."""
    if not opened and not folder.exists():
        return None  # made when the client opens; a folder that cannot be made fails that as StoreError
    try:
        # A file made and dropped at once: what Chroma's own writes (journal, segments) need.
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        if not folder.is_dir():
            return f"embedded Chroma's folder {folder} is gone"
        return f"embedded Chroma's folder {folder} cannot be written: {exc.strerror or exc}"
    if opened:
        database = folder / _EMBEDDED_DATABASE
        try:
            with database.open("rb+"):
                pass
        except FileNotFoundError:
            return f"embedded Chroma's database {database} is gone"
        except OSError as exc:
            return f"embedded Chroma's database {database} cannot be written: {exc.strerror or exc}"
    return None


def _partitions(conn: sa.Connection, version_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The partition of each of these versions, as the catalog labels them now."""
    rows = conn.execute(
        sa.text("SELECT id, scopes FROM documents WHERE id = ANY(CAST(:ids AS uuid[]))"),
        {"ids": list(version_ids)},
    )
    return {r[0]: partition(r[1]) for r in rows}


def _kept(
    conn: sa.Connection, found: dict[int, float], allowed: str, bind: dict[str, Any]
) -> list[tuple[int, float]]:
    """The candidates that are chunks of allowed versions, nearest first."""
    if not found:
        return []
    ok = set(
        conn.execute(
            sa.text(f"SELECT c.id FROM chunks c WHERE c.id = ANY(:cands) AND {allowed}"),
            {**bind, "cands": list(found)},
        ).scalars()
    )
    return sorted(((cid, d) for cid, d in found.items() if cid in ok), key=lambda item: (item[1], item[0]))
