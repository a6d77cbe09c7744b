#!/usr/bin/env python3
"""A hostile HTTP/2 client of traind's Unix socket, frame by frame (h2), for
the transport limits (issue 14, test_e2e_transport.c).

usage: h2flood.py SOCKET DAEMON_PID MODE N

MODE
  reset    N pairs of HEADERS + RST_STREAM on one connection (rapid reset)
  streams  N streams opened and left open on one connection
  prefix   one SubmitJob whose gRPC length prefix claims 2 GiB, then up to
           N MiB of its body, as fast as the daemon's flow control lets it in

While it runs it samples the daemon's resident memory (/proc/PID/status) and
ends with one line: "peak_rss_kib K idle_rss_kib I sent S refused R ended E":
S the frames or bytes it got out, R the streams the daemon refused or reset,
E 1 when the daemon closed the connection (GOAWAY or EOF).
"""
import select
import socket
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Flood:
    def __init__(self, path, pid):
        self.pid = pid
        self.idle = rss_kib(pid)
        self.peak = self.idle
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.setblocking(False)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.refused = 0
        self.ended = 0
        self.out = b""
        self.pump(0.2)

    def sample(self):
        self.peak = max(self.peak, rss_kib(self.pid))

    def pump(self, wait):
        """Moves bytes both ways for up to `wait` seconds (at least once)."""
        self.out += self.conn.data_to_send()
        deadline = time.monotonic() + wait
        while True:
            want_w = [self.sock] if self.out else []
            left = max(0.0, deadline - time.monotonic())
            r, w, _ = select.select([self.sock], want_w, [], min(left, 0.05))
            if w:
                try:
                    n = self.sock.send(self.out)
                    self.out = self.out[n:]
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    self.ended = 1
                    return
            if r:
                try:
                    data = self.sock.recv(1 << 20)
                except (BlockingIOError, InterruptedError):
                    data = None
                except OSError:
                    data = b""
                if data == b"":
                    self.ended = 1
                    return
                if data:
                    try:
                        events = self.conn.receive_data(data)
                    except h2.exceptions.ProtocolError:
                        self.ended = 1
                        return
                    for ev in events:
                        if isinstance(ev, h2.events.StreamReset):
                            self.refused += 1
                        elif isinstance(ev, h2.events.ConnectionTerminated):
                            self.ended = 1
                    self.out += self.conn.data_to_send()
            self.sample()
            if time.monotonic() >= deadline and not self.out:
                return
            if time.monotonic() >= deadline + 5:
                return  # the daemon stopped reading: what is still queued stays queued

    def headers(self, method):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", method),
                                     (":authority", "localhost"), ("content-type", "application/grpc"),
                                     ("te", "trailers")])
        return sid


def open_streams(f, n, reset):
    """n streams, each reset at once (reset) or left open."""
    sent = 0
    for i in range(n):
        if f.ended:
            break
        try:
            sid = f.headers("/traind.v1.Trainer/GetNode")
            if reset:
                f.conn.reset_stream(sid)
        except h2.exceptions.TooManyStreamsError:
            f.pump(0.2)  # the daemon's MAX_CONCURRENT_STREAMS: h2 itself holds us to it
            break
        except h2.exceptions.ProtocolError:
            f.ended = 1
            break
        sent += 1
        if i % 100 == 99:
            f.pump(0.0)
    f.pump(2.0)
    return sent


def prefix(f, mib):
    sid = f.headers("/traind.v1.Trainer/SubmitJob")
    f.conn.send_data(sid, b"\x00\x7f\xff\xff\xff")
    chunk = b"\x0a" * 16384
    sent, limit, stalled = 0, mib << 20, time.monotonic()
    while sent < limit and not f.ended and time.monotonic() - stalled < 3:
        try:
            room = min(f.conn.local_flow_control_window(sid), f.conn.max_outbound_frame_size, len(chunk))
        except (h2.exceptions.StreamClosedError, KeyError):
            break
        if room <= 0 or len(f.out) > (4 << 20):
            f.pump(0.05)
            continue
        try:
            f.conn.send_data(sid, chunk[:room])
        except h2.exceptions.ProtocolError:
            break
        sent += room
        stalled = time.monotonic()
        if len(f.out) > (1 << 20):
            f.pump(0.0)
    f.pump(2.0)
    return sent


def main():
    path, pid, mode, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    f = Flood(path, pid)
    if mode == "prefix":
        sent = prefix(f, n)
    else:
        sent = open_streams(f, n, mode == "reset")
    f.sample()
    print(f"peak_rss_kib {f.peak} idle_rss_kib {f.idle} sent {sent} refused {f.refused} ended {f.ended}", flush=True)


if __name__ == "__main__":
    main()
