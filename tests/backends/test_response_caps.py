"""Issue 36 item 4b: an endless body or endless header lines stop at a cap, as a
(retryable) connection error, instead of growing until the request timeout, on both HTTP
clients; the native client's parser is incremental (any split of the bytes reads the same).
Peak memory and event-loop stalls against an endless server: benchmarks/response_caps.py."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from pytest_quantagent.backends import http_client
from pytest_quantagent.backends.http_client import NativeHTTPClient
from pytest_quantagent.backends.openai_compat import OpenAICompatBackend

ENDLESS = {
    "chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"400\r\n" + b"x" * 1024 + b"\r\n",
                "body over"),
    "headers": (b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"y" * 1000 + b"\r\n", "head over"),
    "no-length": (b"HTTP/1.1 200 OK\r\n\r\n", b"z" * 4096, "body over"),
}


@pytest.mark.parametrize("kind", sorted(ENDLESS))
def test_endless_response_stops_at_the_cap(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_client, "MAX_RESPONSE_HEAD", 8 * 1024)
    monkeypatch.setattr(http_client, "MAX_RESPONSE_BODY", 32 * 1024)
    first, piece, error = ENDLESS[kind]
    sent = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await reader.readuntil(b"\r\n\r\n")
        writer.write(first)
        try:
            for _ in range(100_000):  # bounded: the client hangs up long before
                writer.write(piece)
                sent += len(piece)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        client = NativeHTTPClient(url, {}, max_connections=1, timeout_s=30)
        try:
            with pytest.raises(ConnectionError, match=error):
                await client.post("/chat/completions", b"{}")
        finally:
            await client.aclose()
            server.close()

    asyncio.run(main())
    assert sent < 100_000 * len(piece)


@pytest.mark.parametrize("kind", ["chunked", "no-length"])
def test_httpx_client_stops_an_endless_body_at_the_cap(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The httpx path (https://, proxies) streams the body under the same cap.
    monkeypatch.setattr(http_client, "MAX_RESPONSE_BODY", 32 * 1024)
    first, piece, _ = ENDLESS[kind]
    sent = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await reader.readuntil(b"\r\n\r\n")
        writer.write(first)
        try:
            for _ in range(100_000):
                writer.write(piece)
                sent += len(piece)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            with pytest.raises(ConnectionError, match="body over 32768 bytes"):
                await http_client.httpx_request(client, "POST", "/chat/completions", content=b"{}")
        server.close()

    asyncio.run(main())
    assert sent < 100_000 * len(piece)


def test_httpx_client_refuses_endless_header_lines_as_infrastructure() -> None:
    # h11 bounds the head (100 KB); its RemoteProtocolError is a retryable transport error.
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n")
        try:
            for _ in range(10_000):
                writer.write(b"X-Pad: " + b"y" * 1000 + b"\r\n")
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        backend = OpenAICompatBackend(base_url=url, model="m", http_client="httpx")
        try:
            with pytest.raises(httpx.RemoteProtocolError) as info:
                await http_client.httpx_request(backend.endpoints[0].transport,  # type: ignore[arg-type]
                                                  "POST", "/chat/completions", content=b"{}")
            assert backend.is_retryable(info.value)
        finally:
            await backend.aclose()
            server.close()

    asyncio.run(main())


def test_content_length_over_the_cap_is_refused_before_the_body(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_client, "MAX_RESPONSE_BODY", 1000)
    finished = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n")
        await writer.drain()
        await reader.read()  # the body never comes: the client must hang up without it
        writer.close()
        await writer.wait_closed()
        finished.set()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        client = NativeHTTPClient(url, {}, max_connections=1, timeout_s=2)
        try:
            with pytest.raises(ConnectionError, match="Content-Length 5000"):
                await client.post("/chat/completions", b"{}")
            await asyncio.wait_for(finished.wait(), 5)
        finally:
            await client.aclose()
            server.close()

    asyncio.run(main())


def _chunked(body: bytes, rng: random.Random) -> bytes:
    out = bytearray(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    pos = 0
    while pos < len(body):
        n = rng.randint(1, 300)
        ext = b";name=value" if rng.random() < 0.2 else b""
        out += f"{n if pos + n <= len(body) else len(body) - pos:x}".encode() + ext + b"\r\n"
        out += body[pos:pos + n] + b"\r\n"
        pos += n
    out += b"0\r\n" + (b"X-Trailer: t\r\n" if rng.random() < 0.5 else b"") + b"\r\n"
    return bytes(out)


@pytest.mark.parametrize("seed", range(8))
def test_incremental_parser_reads_responses_split_at_any_point(seed: int) -> None:
    # The linear parser must give the same body whatever pieces the bytes arrive in: a
    # chunked body (with extensions and trailers) or a Content-Length one, split at random
    # points (one byte at a time included), two responses on one keep-alive connection.
    rng = random.Random(seed)
    bodies = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 3000))) for _ in range(2)]
    wires = [_chunked(bodies[0], rng),
             b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(bodies[1]) + bodies[1]]

    async def main() -> None:
        conn = http_client._HTTPConnection()

        class _Transport:
            def write(self, data: bytes) -> None:
                pass

            def is_closing(self) -> bool:
                return False

            def close(self) -> None:
                raise AssertionError("the connection was closed")

        conn.transport = _Transport()  # type: ignore[assignment]
        for wire, body in zip(wires, bodies, strict=True):
            fut = conn.request(b"")
            pos = 0
            while pos < len(wire):
                n = 1 if seed == 0 else rng.randint(1, 500)
                conn.data_received(wire[pos:pos + n])
                pos += n
            assert fut.done()
            assert await fut == (200, True, body)

    asyncio.run(main())


@pytest.mark.parametrize("wire", [
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 2000,
    b"HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\n",
    b"SMTP 220 hello\r\n\r\n",
])
def test_malformed_framing_fails_the_request(wire: bytes) -> None:
    async def main() -> None:
        conn = http_client._HTTPConnection()

        class _Transport:
            def write(self, data: bytes) -> None:
                pass

        conn.transport = _Transport()  # type: ignore[assignment]
        fut = conn.request(b"")
        conn.data_received(wire)
        with pytest.raises(ValueError):
            await fut

    asyncio.run(main())
