"""Follow session pages the way a browser's page does, without a browser: one WebSocket
per session to ``/ws/sessions/<id>/``, subscribed like static/tarsy/live.js, noting when
each stamped word (bench/live_scale.py) first arrives. Run as a child process by
bench/live_scale.py (``--remote-pages``), so that the sessions it follows cost the
machine what a page costs the server (the socket, the fragments) and not what rendering
them costs a browser, which runs on the SRE's own machine.

Usage: page_sockets.py <base url> <cookie header> <session id>...; runs until its stdin
closes, then prints {word: first seen (ms since the epoch)} as JSON.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time

import websockets

STAMP = re.compile(r"t\d{16}x")


async def follow(url: str, cookie: str, origin: str, seen: dict[str, float]) -> None:
    headers = {"Cookie": cookie, "Origin": origin}
    async with websockets.connect(url, additional_headers=headers, max_size=None) as socket:
        await socket.send(json.dumps({"action": "subscribe", "last_event_id": 0}))
        async for message in socket:
            now = time.time() * 1000
            for word in STAMP.findall(message if isinstance(message, str) else message.decode()):
                seen.setdefault(word, now)


async def main() -> None:
    base, cookie, *ids = sys.argv[1:]
    origin = base
    ws_base = base.replace("http://", "ws://")
    seen: dict[str, float] = {}
    tasks = [
        asyncio.create_task(follow(f"{ws_base}/ws/sessions/{i}/", cookie, origin, seen))
        for i in ids
    ]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
