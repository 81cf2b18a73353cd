"""Real object stores on loopback for the remote tests, and a filesystem wrapper that counts.

An S3 API served by moto (one server per test run, a fresh bucket per test) and a range-capable
HTTP server over a temporary folder. Neither binds anything but 127.0.0.1. Tests measure what a
job costs by requests and bytes, never by wall time (moto copies a whole object for every range
request, so its timings mean nothing): `Counter` wraps the S3 filesystem's request method
(the `counter` fixture), and the HTTP server counts what it serves (`HttpServer.requests`).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

_BODY_OPERATIONS = frozenset({"put_object", "upload_part"})  # requests that send bytes


@dataclass
class Request:
    """One request that reached the store: the operation (``get_object``, ``head_object``,
    ``list_objects_v2``, ``upload_part``...), the key, the byte range asked for (end exclusive),
    and the bytes that came back (a GET's body) or went out (an upload's)."""

    method: str
    key: str
    start: int | None = None
    end: int | None = None
    nbytes: int = 0


@dataclass
class Counter:
    """Every request the S3 filesystem makes during one test (`counter`).

    It wraps the filesystem's one request method (s3fs's ``_call_s3``), so it sees every request
    whatever fsspec call made it: ranged GETs, HEADs, listings, multipart uploads. ``delay``
    seconds are slept before each GET (a slow store), and ``in_flight_max`` is the most requests
    that were in flight at the same moment.
    """

    requests: list[Request] = field(default_factory=list)
    delay: float = 0.0
    in_flight_max: int = 0
    _in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def reset(self) -> None:
        """Forget everything counted so far (after a test's setup uploads)."""
        with self._lock:
            self.requests.clear()
            self.in_flight_max = 0

    @property
    def count(self) -> int:
        """Requests of every kind."""
        return len(self.requests)

    @property
    def gets(self) -> list[Request]:
        """The data requests (GetObject)."""
        return [r for r in self.requests if r.method == "get_object"]

    @property
    def nbytes(self) -> int:
        """Bytes the store sent back (GET bodies)."""
        return sum(r.nbytes for r in self.requests if r.method not in _BODY_OPERATIONS)

    @property
    def bytes_written(self) -> int:
        """Bytes sent to the store (PutObject and UploadPart bodies)."""
        return sum(r.nbytes for r in self.requests if r.method in _BODY_OPERATIONS)

    def operations(self) -> list[str]:
        """The operations in the order they were made."""
        return [r.method for r in self.requests]

    def enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self._in_flight)

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1


_RANGE_HEADER = re.compile(r"bytes=(\d+)-(\d+)$")


def _request_of(method: str, kwargs: dict[str, Any], response: Any) -> Request:
    start = end = None
    match = _RANGE_HEADER.match(str(kwargs.get("Range", "")))
    if match is not None:
        start, end = int(match.group(1)), int(match.group(2)) + 1
    nbytes = 0
    if method == "get_object" and isinstance(response, dict):
        nbytes = int(response.get("ContentLength", 0))
    elif method in _BODY_OPERATIONS:
        body = kwargs.get("Body", b"")
        nbytes = len(body) if isinstance(body, (bytes, bytearray, memoryview)) else 0
    return Request(method, str(kwargs.get("Key", "")), start, end, nbytes)


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Count every request any s3fs filesystem makes in this test (see `Counter`)."""
    s3fs = pytest.importorskip("s3fs")
    counter = Counter()
    real = s3fs.S3FileSystem._call_s3

    async def call_s3(self: Any, method: Any, *args: Any, **kwargs: Any) -> Any:
        name = method if isinstance(method, str) else getattr(method, "__name__", str(method))
        counter.enter()
        try:
            if counter.delay and name == "get_object":
                await asyncio.sleep(counter.delay)
            response = await real(self, method, *args, **kwargs)
        finally:
            counter.leave()
        counter.record(_request_of(name, kwargs, response))
        return response

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", call_s3)
    return counter


# -- S3 (moto) ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """An S3 API served by moto on 127.0.0.1 for the whole run, with dummy credentials."""
    pytest.importorskip("s3fs")
    pytest.importorskip("boto3")
    server_mod = pytest.importorskip("moto.server")
    with pytest.MonkeyPatch.context() as env:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL"):
            env.delenv(name, raising=False)
        env.setenv("AWS_ACCESS_KEY_ID", "x")
        env.setenv("AWS_SECRET_ACCESS_KEY", "x")
        env.setenv("AWS_DEFAULT_REGION", "us-east-1")
        env.setenv("AWS_CONFIG_FILE", os.devnull)
        env.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        env.setenv("NO_PROXY", "127.0.0.1,localhost")
        env.setenv("no_proxy", "127.0.0.1,localhost")
        server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@pytest.fixture
def storage_options(s3_endpoint: str) -> dict[str, Any]:
    """What a user passes to reach the loopback S3 API."""
    return {"endpoint_url": s3_endpoint, "key": "x", "secret": "x"}


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> Iterator[str]:
    """A fresh, empty bucket for one test: yields ``s3://<bucket>``."""
    import boto3

    name = f"ws-{uuid.uuid4().hex[:20]}"
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id="x",
        aws_secret_access_key="x",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=name)
    yield f"s3://{name}"
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def s3_put(s3_bucket: str, storage_options: dict[str, Any]) -> Callable[[str, bytes], str]:
    """Upload bytes as an object of the test's bucket; returns its URL."""
    import s3fs

    fs = s3fs.S3FileSystem(**storage_options, skip_instance_cache=True)

    def put(name: str, data: bytes) -> str:
        url = f"{s3_bucket}/{name}"
        fs.pipe_file(url, data)
        return url

    return put


# -- HTTP -----------------------------------------------------------------------------------

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder with ``Range: bytes=a-b`` support (206 responses), as object stores do."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _file(self) -> Path | None:
        path = Path(self.translate_path(self.path))
        return path if path.is_file() else None

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, *, body: bool) -> None:
        path = self._file()
        if path is None:
            self.send_error(404)
            return
        data = path.read_bytes()
        size = len(data)
        start, end = 0, size - 1
        header = self.headers.get("Range")
        if self.server.settings.get("ignore_ranges"):  # type: ignore[attr-defined]
            header = None  # as a server without range support answers: the whole file
        status = 200
        if header:
            match = _RANGE.match(header.strip())
            if match is None:
                self.send_error(416)
                return
            first, last = match.groups()
            if first == "":  # suffix range: the last N bytes
                start, end = max(0, size - int(last)), size - 1
            else:
                start = int(first)
                end = min(int(last), size - 1) if last else size - 1
            if start >= size or start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        chunk = data[start : end + 1]
        served = Request(self.command, self.path, start, end + 1, len(chunk) if body else 0)
        self.server.requests.append(served)  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(chunk)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if body:
            # The client may read what it wanted and close (a refused whole-file answer).
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(chunk)


@dataclass
class HttpServer:
    """A loopback HTTP server over `root`; `url(name)` is the address of a file in it, and
    `requests` every request it answered with bytes (method ``GET``/``HEAD``, the path, the
    range served and the body's size)."""

    root: Path
    base: str
    requests: list[Request]
    settings: dict[str, Any]  # "ignore_ranges": True makes it answer every GET whole

    @property
    def nbytes(self) -> int:
        """Body bytes served."""
        return sum(r.nbytes for r in self.requests)

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[HttpServer]:
    """A range-capable HTTP server on 127.0.0.1 serving a fresh temporary folder."""
    pytest.importorskip("aiohttp")
    root = tmp_path / "http"
    root.mkdir()

    def handler(*args: Any, **kwargs: Any) -> RangeHandler:
        return RangeHandler(*args, directory=str(root), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    served: list[Request] = []
    settings: dict[str, Any] = {}
    server.requests = served  # type: ignore[attr-defined]
    server.settings = settings  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield HttpServer(root, f"http://{host}:{port}", served, settings)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# -- files ----------------------------------------------------------------------------------


def safetensors_bytes(tensors: dict[str, Any]) -> bytes:
    """A SafeTensors file of `tensors` (NumPy arrays), written by the safetensors package."""
    from tests._optional import need

    return bytes(need("safetensors.numpy").save(tensors))


def burnpack_bytes(tensors: dict[str, Any]) -> bytes:
    """A burnpack file of `tensors` (NumPy arrays), written by weightstore."""
    from weightstore import BurnpackStore, save_into

    store = BurnpackStore.from_bytes()
    save_into(dict(tensors), store)
    return store.get_bytes()


def read_options(storage_options: dict[str, Any], **tuning: Any) -> dict[str, Any]:
    """`storage_options` with weightstore's read settings (`ReadTuning`) added."""
    return {**storage_options, "weightstore": tuning}
