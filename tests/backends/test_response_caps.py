"""Issue 36 item 4b: an endless body or endless header lines stop at a cap, as a
(retryable) connection error, instead of growing until the request timeout."""

from __future__ import annotations

import asyncio

import pytest

from pytest_quantagent.backends import openai_compat
from pytest_quantagent.backends.openai_compat import NativeHTTPClient

ENDLESS = {
    "chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"400\r\n" + b"x" * 1024 + b"\r\n",
                "body over"),
    "headers": (b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"y" * 1000 + b"\r\n", "head over"),
    "no-length": (b"HTTP/1.1 200 OK\r\n\r\n", b"z" * 4096, "body over"),
}


@pytest.mark.parametrize("kind", sorted(ENDLESS))
def test_endless_response_stops_at_the_cap(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_compat, "MAX_RESPONSE_HEAD", 8 * 1024)
    monkeypatch.setattr(openai_compat, "MAX_RESPONSE_BODY", 32 * 1024)
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
