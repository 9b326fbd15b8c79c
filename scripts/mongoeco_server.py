#!/usr/bin/env python3
"""A MongoDB wire-protocol server on loopback for FormAttest's tests (mongoeco[wire] 4.11.0).

Prints "URI <mongodb uri>" once listening, then serves until SIGTERM/SIGINT, or until its
standard input reaches end of file (so that it dies with the test process that started it).

usage: mongoeco_server.py [--port N] [--sqlite PATH] [--watch-stdin]
"""
import argparse
import asyncio
import signal
import sys

from mongoeco.engines.memory import MemoryEngine
from mongoeco.engines.sqlite import SQLiteEngine
from mongoeco.wire import AsyncMongoEcoProxyServer


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--sqlite", help="persist in this SQLite file (survives a restart)")
    parser.add_argument("--watch-stdin", action="store_true")
    args = parser.parse_args()

    engine = SQLiteEngine(args.sqlite) if args.sqlite else MemoryEngine()
    server = AsyncMongoEcoProxyServer(engine=engine, host="127.0.0.1", port=args.port)
    address = await server.start()
    print(f"URI {address.uri}", flush=True)

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.watch_stdin:
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

        async def watch() -> None:
            while await reader.read(4096):
                pass
            stop.set()

        loop.create_task(watch())
    await stop.wait()
    await server.close()


if __name__ == "__main__":
    asyncio.run(main())
