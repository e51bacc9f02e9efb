"""The soak's HTTP client: answers split across packets, keep-alive reuse, a node that drops the
connection, and a timeout that must not let a late answer be read as the next one."""

import asyncio

import pytest

from bench.soakload import Pool


async def _server(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def _read_request(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    return head, await reader.readexactly(length)


def test_posts_reuse_a_connection_and_read_split_answers():
    connections = []

    async def handler(reader, writer):
        connections.append(writer)
        while True:
            try:
                head, body = await _read_request(reader)
            except asyncio.IncompleteReadError:
                return
            assert head.startswith(b"POST /v1/events HTTP/1.1") and b"Authorization: x" in head
            answer = b'{"echo": ' + body + b"}"
            reply = b"HTTP/1.1 201 Created\r\ncontent-length: %d\r\n\r\n" % len(answer) + answer
            for i in range(0, len(reply), 7):  # in small pieces
                writer.write(reply[i : i + 7])
                await writer.drain()
                await asyncio.sleep(0)

    async def main():
        server, url = await _server(handler)
        pool = Pool(url)
        try:
            for n in range(5):
                status, raw = await pool.post("/v1/events", b"%d" % n, b"Authorization: x\r\n", 5)
                assert (status, raw) == (201, b'{"echo": %d}' % n)
        finally:
            pool.close()
            server.close()
        assert len(connections) == 1  # kept alive

    asyncio.run(main())


def test_a_dropped_connection_raises_and_the_next_post_reconnects():
    calls = []

    async def handler(reader, writer):
        await _read_request(reader)
        calls.append(1)
        if len(calls) == 1:
            writer.close()  # the node died mid-request
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    async def main():
        server, url = await _server(handler)
        pool = Pool(url)
        try:
            with pytest.raises(ConnectionError):
                await pool.post("/x", b"{}", b"", 5)
            assert await pool.post("/x", b"{}", b"", 5) == (200, b"ok")
        finally:
            pool.close()
            server.close()

    asyncio.run(main())


def test_a_timed_out_answer_is_never_taken_for_the_next_one():
    release = asyncio.Event()

    async def handler(reader, writer):
        head, body = await _read_request(reader)
        if body == b"slow":
            await release.wait()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()

    async def main():
        server, url = await _server(handler)
        pool = Pool(url)
        try:
            with pytest.raises(TimeoutError):
                await pool.post("/x", b"slow", b"", 0.2)
            release.set()
            assert await pool.post("/x", b"fast", b"", 5) == (200, b"fast")
        finally:
            pool.close()
            server.close()

    asyncio.run(main())


def test_the_failover_table_shows_the_outage_even_when_an_ack_slips_in_first():
    from bench.soak import failovers

    history = [
        {"type": "fault", "t": 10.0, "kind": "broker", "target": "kafka", "was_leader": False,
         "end_t": 35.5},  # the broker's stop and start took 25.5 s
        {"type": "invoke", "t": 10.1, "id": "a", "node": "n1"},
        {"type": "ok", "t": 10.2, "id": "a", "node": "n1"},  # before the broker went down
        {"type": "invoke", "t": 11.0, "id": "b", "node": "n1"},
        {"type": "ok", "t": 40.2, "id": "b", "node": "n1"},  # 30 s without an ack
        {"type": "fault", "t": 50.0, "kind": "kill", "target": "n2", "was_leader": True},
        {"type": "invoke", "t": 50.5, "id": "c", "node": "n1"},
        {"type": "ok", "t": 52.0, "id": "c", "node": "n1"},
    ]
    broker, kill = failovers(history)
    assert broker["recovered_after_s"] == 0.2 and broker["longest_without_ack_s"] == 30.0
    assert kill["recovered_after_s"] == 2.0 and kill["longest_without_ack_s"] == 2.0
    assert broker["fault_lasted_s"] == 25.5 and kill["fault_lasted_s"] is None
