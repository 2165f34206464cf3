"""A byte-for-byte TCP relay on 127.0.0.1 that keeps what passes, so that bench/e2e_clients.py can tell
every HTTP request a real client made to llmproxy and what it got back (not part of the test run).

The relay changes nothing: each accepted connection gets its own connection upstream and bytes are
copied both ways as they come (a stream stays a stream). Afterwards ``exchanges()`` reads the recorded
bytes as HTTP/1.1: requests framed by Content-Length or chunked encoding, responses likewise or up to
the connection's close, HEAD answers bodiless; each with the time its request began to arrive and its
answer's last byte (from when each piece was read), in the order the requests were sent.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import time
from dataclasses import dataclass, field
from typing import Any

from threaded_server import ThreadedServer


@dataclass
class Exchange:
    """One request and its response, as read from a recorded connection."""

    method: str
    target: str
    request_headers: dict[str, str]
    request_body: bytes
    status: int | None = None  # None: no (complete) response came back
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: bytes = b""
    sent_at: float | None = None  # time.time() when the request's first byte came, where recorded
    answered_at: float | None = None  # when the answer's last byte came

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    def request_json(self) -> Any:
        try:
            return json.loads(self.request_body)
        except ValueError:
            return None

    def summary(self) -> dict[str, Any]:
        body = self.response_body.decode("utf-8", "replace")
        return {"request": f"{self.method} {self.target}", "status": self.status,
                "request_headers": self.request_headers, "request_body": self.request_json()
                or self.request_body.decode("utf-8", "replace"),
                "response_headers": self.response_headers, "response_body": body}


def _head(data: bytes, at: int) -> tuple[str, dict[str, str], int] | None:
    """(first line, headers with lower-case names, where the body starts) of the message at ``at``."""
    end = data.find(b"\r\n\r\n", at)
    if end < 0:
        return None
    lines = data[at:end].decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers, end + 4


def _body(data: bytes, at: int, headers: dict[str, str], until_close: bool) -> tuple[bytes, int] | None:
    """(the body, where the next message starts); None if the recording stops inside it."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        pieces = []
        while True:
            line_end = data.find(b"\r\n", at)
            if line_end < 0:
                return None
            size = int(data[at:line_end].split(b";")[0].strip() or b"0", 16)
            at = line_end + 2
            if size == 0:
                trailer_end = data.find(b"\r\n", at)  # no trailers are sent in practice
                return b"".join(pieces), (trailer_end + 2 if trailer_end >= 0 else len(data))
            if len(data) < at + size:
                return None
            pieces.append(data[at:at + size])
            at += size + 2
    if "content-length" in headers:
        length = int(headers["content-length"])
        return (data[at:at + length], at + length) if len(data) >= at + length else None
    return (data[at:], len(data)) if until_close else (b"", at)


Stamps = list[tuple[int, float]]  # (offset in a direction's bytes where a piece began, when it was read)


def _time_at(stamps: Stamps, offset: int) -> float | None:
    """When the byte at ``offset`` was read: the time of the piece that holds it."""
    index = bisect.bisect_right([at for at, _ in stamps], offset) - 1
    return stamps[index][1] if index >= 0 else None


def read_exchanges(sent: bytes, received: bytes, sent_stamps: Stamps = (),
                   received_stamps: Stamps = ()) -> list[Exchange]:
    """The exchanges of one connection, from what the client sent and what it received (and when each
    piece of them was read, where known)."""
    exchanges, at = [], 0
    while at < len(sent) and (head := _head(sent, at)) is not None:
        line, headers, start = head
        method, target = (line.split(" ") + ["", ""])[:2]
        body = _body(sent, start, headers, until_close=False)
        exchanges.append(Exchange(method, target, headers, body[0] if body else sent[start:],
                                  sent_at=_time_at(list(sent_stamps), at)))
        if body is None:
            break
        at = body[1]
    at = 0
    for exchange in exchanges:
        head = _head(received, at)
        while head is not None and head[0].split(" ")[1:2] and head[0].split(" ")[1].startswith("1"):
            head = _head(received, head[2])  # 100 Continue and the like
        if head is None:
            break
        line, headers, start = head
        status = int(line.split(" ")[1])
        bodiless = exchange.method == "HEAD" or status in (204, 304)
        body = (b"", start) if bodiless else _body(received, start, headers, until_close=True)
        exchange.response_headers = headers
        if body is None:
            exchange.response_body = received[start:]
            break
        exchange.status, exchange.response_body = status, body[0]
        exchange.answered_at = _time_at(list(received_stamps), body[1] - 1)
        at = body[1]
    return exchanges


class Relay(ThreadedServer):
    """Listens on 127.0.0.1 (a free port), relays to ``upstream_port``, records every connection."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        # (client -> server, server -> client, and when each piece of either was read)
        self.connections: list[tuple[bytearray, bytearray, Stamps, Stamps]] = []
        # asyncio forgets a connection's task once the client hangs up, while the upstream half may still be
        # reading: held here, it is not collected (and warned about) half-way
        self.running: set[asyncio.Task] = set()
        super().__init__(lambda loop: asyncio.start_server(self._relay, "127.0.0.1", 0), "the relay")

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        sent, received, sent_stamps, received_stamps = bytearray(), bytearray(), [], []
        self.connections.append((sent, received, sent_stamps, received_stamps))
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_writer.close()
            return

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: bytearray,
                       stamps: Stamps) -> None:
            try:
                while data := await reader.read(65536):
                    stamps.append((len(record), time.time()))
                    record += data
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                try:
                    writer.write_eof()
                except (OSError, RuntimeError):
                    writer.close()

        await asyncio.gather(pipe(client_reader, upstream_writer, sent, sent_stamps),
                             pipe(upstream_reader, client_writer, received, received_stamps))
        client_writer.close()
        upstream_writer.close()

    def exchanges(self) -> list[Exchange]:
        """Every request so far, in the order they were sent."""
        found = [exchange for sent, received, sent_stamps, received_stamps in list(self.connections)
                 for exchange in read_exchanges(bytes(sent), bytes(received), sent_stamps, received_stamps)]
        return sorted(found, key=lambda exchange: exchange.sent_at or 0.0)

    def reset(self) -> None:
        self.connections = []
