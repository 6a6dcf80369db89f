"""Issue 36 item 5's done-when figures: a run against a server whose answers never end.

Run from the repository root::

    QUANTAGENT_DOMAINS_DIR=tests/runner/domains PYTHONPATH=.:tests/runner \\
        python3 benchmarks/response_caps.py [--client native|httpx] [--seconds 90] [--kind chunked]

A loopback server in a child process (so its memory is not counted) answers every chat
request with an endless body (``chunked``: 64 KB chunks, ``no-length``: no framing at all, or
``headers``: endless header lines), each connection bounded at 4 GB. One arm runs the "mini"
domain's episodes against it at concurrency 8 with the default request timeout (120 s) until
the circuit breaker stops the run (or ``--seconds`` pass). Printed: this process's peak RSS
(``ru_maxrss``), the longest event-loop stall seen by a 5 ms ticker (lateness beyond its
sleep: the machine's other load shows there too), the longest single call of the native
client's parser (the stall parsing causes), the requests the server saw and how the run ended.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_quantagent.backends import http_client
from pytest_quantagent.env.registry import get_domain
from pytest_quantagent.quant.arms import ArmSpec
from pytest_quantagent.runner.batch import RunSettings, plan_episodes, run_arm
from pytest_quantagent.runner.build import build_arm
from pytest_quantagent.store.jsonl import EpisodeStore

SERVER = textwrap.dedent('''
    import asyncio, sys
    kind = sys.argv[1]
    requests = 0
    HEADS = {"chunked": b"HTTP/1.1 200 OK\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n",
             "no-length": b"HTTP/1.1 200 OK\\r\\n\\r\\n", "headers": b"HTTP/1.1 200 OK\\r\\n"}
    PIECE = {"chunked": b"10000\\r\\n" + b"x" * 65536 + b"\\r\\n", "no-length": b"z" * 65536,
             "headers": b"X-Pad: " + b"y" * 1000 + b"\\r\\n"}[kind]
    async def handle(reader, writer):
        global requests
        try:
            while True:
                head = await reader.readuntil(b"\\r\\n\\r\\n")
                n = int(head.lower().split(b"content-length:")[1].split(b"\\r\\n")[0])
                await reader.readexactly(n)
                requests += 1
                print(requests, flush=True)
                writer.write(HEADS[kind])
                for _ in range(4 * 2 ** 30 // len(PIECE)):  # bounded: 4 GB a connection
                    writer.write(PIECE)
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.sleep(600)
    asyncio.run(main())
''')


def _timed_parser(longest: list[float]) -> None:
    """Time every call of the native client's parser (``data_received``): its longest call
    (wall clock, and CPU time of this thread, which a busy machine's preemption does not
    inflate) is the stall that parsing itself causes."""
    inner = http_client._HTTPConnection.data_received

    def data_received(self: http_client._HTTPConnection, data: bytes) -> None:
        t, c = time.perf_counter(), time.thread_time()
        inner(self, data)
        longest[0] = max(longest[0], time.perf_counter() - t)
        longest[2] = max(longest[2], time.thread_time() - c)
        longest[1] += 1

    http_client._HTTPConnection.data_received = data_received  # type: ignore[method-assign]


async def _ticker(stalls: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        t = loop.time()
        await asyncio.sleep(0.005)
        stalls.append(loop.time() - t - 0.005)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", default="native", choices=("native", "httpx"))
    ap.add_argument("--kind", default="chunked", choices=("chunked", "no-length", "headers"))
    ap.add_argument("--seconds", type=float, default=90.0)
    args = ap.parse_args()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, args.kind], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    url = f"http://127.0.0.1:{port}/v1"
    domain = get_domain("mini")
    rt = build_arm(ArmSpec(label="int4", backend="openai", model="m", base_url=url,
                           options={"http_client": args.client}), concurrency=8)
    plan = plan_episodes([t.id for t in domain.tasks], 10, 0)
    stalls: list[float] = []
    parse = [0.0, 0, 0.0]
    if args.client == "native":
        _timed_parser(parse)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    async def run() -> str:
        ticker = asyncio.ensure_future(_ticker(stalls))
        try:
            with tempfile.TemporaryDirectory() as d:
                await asyncio.wait_for(run_arm(domain=domain, runtime=rt, plan=plan,
                                               store=EpisodeStore(Path(d)),
                                               settings=RunSettings(concurrency=8)), args.seconds)
            return "finished"
        except TimeoutError:
            return f"still running after {args.seconds:g} s (stopped by the benchmark)"
        except Exception as e:  # the breaker's stop is the expected end
            return f"{type(e).__name__}: {str(e)[:160]}"
        finally:
            ticker.cancel()
            await rt.aclose()

    t0 = time.monotonic()
    end = asyncio.run(run())
    wall = time.monotonic() - t0
    proc.kill()
    out, _ = proc.communicate()
    requests = len(out.split())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stalls.sort()
    print(f"endless {args.kind} body, {args.client} client, concurrency 8, default timeout: "
          f"peak RSS {peak:.0f} MB (before the run {rss0:.0f} MB), longest event-loop stall "
          f"{stalls[-1] * 1e3:.1f} ms ({sum(x > 0.05 for x in stalls)} over 50 ms, p99 {stalls[int(len(stalls) * 0.99)] * 1e3:.1f} ms, "
          f"{len(stalls)} ticks; longest parser call {parse[0] * 1e3:.1f} ms wall, "
          f"{parse[2] * 1e3:.1f} ms CPU, of {parse[1]} calls), "
          f"{requests} requests in {wall:.1f} s; run ended: {end}")


if __name__ == "__main__":
    main()
