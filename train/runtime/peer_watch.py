"""The processes of a multi-process job watch each other's connections, so
that a lost process is reported, not waited on.

Right after jax.distributed joins the job, every process other than 0 opens
a TCP connection to process 0 (`start`). A process that ends, however it
ends (an error, SIGKILL, the out-of-memory killer), has its connection
closed by its kernel at once; a host that goes down or off the network stops
answering TCP keepalive probes, which that host's kernel answers, not the
process. Neither depends on the watched process being scheduled, so a
process busy compiling on a loaded machine is never taken for a lost one
(the coordination service's heartbeats, which its process sends, can be
late there; see train.main's --heartbeat_timeout_s, which still catches a
process that hangs with its host up).

A deliberate end is said on the connection first: a finished run or a
preempted one (`end`), or a process that stopped on its own error
(`exit_on_error`). When process 0 sees a connection close without a word,
or hears of an error, it passes the news to every other process, and each
prints one line naming the process and how to resume, then exits with
status 1 at once, from wherever its main thread waits (a collective, a
barrier, a checkpoint save).
"""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import traceback

import jax
from jax._src import distributed  # the coordination service's client

# The coordination-service key under which process 0 publishes its port.
PORT_KEY = "genenv/peer_watch_port"
# Exit status of a process stopped because another one was lost or failed.
EXIT_STATUS = 1
# Keepalive probes before a silent host is declared lost.
KEEPALIVE_PROBES = 4
RESUME_HINT = ("Once every host is back, rerun the same command on each to "
               "resume from the last checkpoint.")


def keepalive_options(timeout_s: int) -> dict[str, int]:
  """TCP socket options under which a connection whose peer host stops
  answering fails within `timeout_s` seconds: {TCP_KEEPIDLE, TCP_KEEPINTVL,
  TCP_KEEPCNT (seconds, seconds, probes), TCP_USER_TIMEOUT (ms, for data
  left unacknowledged)}; idle + probes x interval <= timeout_s.

  Raises ValueError naming the flag when timeout_s < 2 * (probes + 1).
  """
  if timeout_s < 2 * (KEEPALIVE_PROBES + 1):
    raise ValueError(
        f"--lost_host_timeout_s={timeout_s}: expected at least "
        f"{2 * (KEEPALIVE_PROBES + 1)} seconds (0 turns the watch off).")
  idle = timeout_s // 2
  interval = (timeout_s - idle) // KEEPALIVE_PROBES
  return {"TCP_KEEPIDLE": idle, "TCP_KEEPINTVL": interval,
          "TCP_KEEPCNT": KEEPALIVE_PROBES,
          "TCP_USER_TIMEOUT": timeout_s * 1000}


def _set_keepalive(sock: socket.socket, timeout_s: int) -> None:
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
  for name, value in keepalive_options(timeout_s).items():
    if hasattr(socket, name):  # Linux names them all
      sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def _host(coordinator_address: str) -> str:
  """The host part of HOST:PORT ([v6]:PORT too)."""
  return coordinator_address.rsplit(":", 1)[0].strip("[]")


class _Connection:
  """One end of a watch connection, read line by line."""

  def __init__(self, sock: socket.socket, peer: int):
    self.sock, self.peer = sock, peer
    self.ended = False  # the peer said it ends on purpose
    self._buffer = b""

  def send(self, line: str) -> None:
    try:
      self.sock.sendall(line.encode() + b"\n")
    except OSError:
      pass  # its end shows as a closed connection on our side too

  def first_line(self) -> str:
    """The first line the peer sends, read byte by byte (nothing after it
    is consumed)."""
    data = b""
    while not data.endswith(b"\n"):
      byte = self.sock.recv(1)
      if not byte:
        raise ConnectionError("closed before saying which process it is")
      data += byte
    return data.decode().strip()

  def read_lines(self) -> list[str] | None:
    """The complete lines now readable; None once the connection is closed
    (or failed: reset, keepalive timed out)."""
    try:
      data = self.sock.recv(4096, socket.MSG_DONTWAIT)
    except BlockingIOError:
      return []  # another thread read it first
    except OSError:
      return None
    if not data:
      return None
    self._buffer += data
    *lines, self._buffer = self._buffer.split(b"\n")
    return [line.decode() for line in lines]


class Watch:
  """This process's side of the job's connections (see the module doc)."""

  def __init__(self, index: int, count: int, timeout_s: int):
    self.index, self.count, self.timeout_s = index, count, timeout_s
    self._connections: list[_Connection] = []
    self._lock = threading.Lock()  # deciding to stop
    self._read_lock = threading.Lock()  # reading the connections
    self._stopping = False

  # Start-up.
  def connect(self, client, coordinator_address: str,
              connect_timeout_s: float) -> None:
    """Opens the job's connections through the coordination `client`
    (process 0 publishes a port, the others connect and say who they are).

    Raises TimeoutError naming the processes that did not connect within
    connect_timeout_s.
    """
    if self.index == 0:
      family = (socket.AF_INET6 if socket.has_dualstack_ipv6()
                else socket.AF_INET)
      with socket.create_server(("", 0), family=family,
                                dualstack_ipv6=family == socket.AF_INET6,
                                backlog=self.count) as server:
        client.key_value_set(PORT_KEY, str(server.getsockname()[1]))
        server.settimeout(connect_timeout_s)
        while len(self._connections) < self.count - 1:
          try:
            sock, _ = server.accept()
          except socket.timeout:
            joined = {c.peer for c in self._connections}
            missing = [p for p in range(1, self.count) if p not in joined]
            raise TimeoutError(
                f"Processes {missing} of {self.count} did not open their "
                f"watch connection to process 0 within {connect_timeout_s} "
                "s (--initialization_timeout_s).") from None
          sock.settimeout(connect_timeout_s)
          connection = _Connection(sock, -1)
          connection.peer = int(connection.first_line().split()[1])
          sock.settimeout(None)
          _set_keepalive(sock, self.timeout_s)
          self._connections.append(connection)
    else:
      port = client.blocking_key_value_get(PORT_KEY,
                                           int(connect_timeout_s * 1000))
      sock = socket.create_connection((_host(coordinator_address), int(port)),
                                      timeout=connect_timeout_s)
      sock.settimeout(None)
      _set_keepalive(sock, self.timeout_s)
      connection = _Connection(sock, 0)
      connection.send(f"hello {self.index}")
      self._connections.append(connection)
    threading.Thread(target=self._listen, name="peer_watch",
                     daemon=True).start()

  # What the others hear.
  def _listen(self) -> None:
    while self._connections:
      readable, _, _ = select.select(
          [c.sock for c in self._connections], [], [])
      with self._read_lock:
        for connection in list(self._connections):
          if connection.sock in readable:
            self._read(connection)

  def _read(self, connection: _Connection) -> None:
    """Acts on what `connection` says now (called under _read_lock)."""
    lines = connection.read_lines()
    if lines is None:
      self._connections.remove(connection)
      if not connection.ended:
        self._stop(connection.peer, "lost", (
            "its connection closed: the process ended without a word, "
            "e.g. killed, or its host did not answer for "
            f"{self.timeout_s} s"))
      return
    for line in lines:
      kind, _, rest = line.partition(" ")
      if kind == "end":
        connection.ended = True
      elif kind in ("failed", "lost"):
        peer, _, how = rest.partition(" ")
        self._stop(int(peer), kind, how)

  def _stop(self, peer: int, kind: str, how: str = "") -> None:
    """Passes the news that process `peer` was lost (kind "lost", `how`) or
    stopped on an error ("failed") on to the others, and ends this
    process."""
    with self._lock:
      if self._stopping:
        return
      self._stopping = True
      for connection in self._connections:
        if connection.peer != peer:
          connection.send(f"{kind} {peer} {how}".strip())
      what = (f"the job lost process {peer} of {self.count} ({how})"
              if kind == "lost" else
              f"process {peer} of {self.count} stopped on an error (its "
              "output has the traceback)")
      sys.stdout.flush()
      print(f"Process {self.index} of {self.count} stopped: {what}. "
            f"{RESUME_HINT}", file=sys.stderr, flush=True)
      os._exit(EXIT_STATUS)  # pylint: disable=protected-access

  # A deliberate end.
  def end(self, how: str) -> None:
    """Tells the others this process ends on purpose (`how`: done,
    preempted); they do not count it as lost."""
    with self._lock:
      self._stopping = True
      for connection in self._connections:
        connection.send(f"end {how}")

  def exit_on_error(self) -> None:
    """For this process's own error, in its handler: prints the traceback;
    when the error came from another process's loss (a collective failing
    on its closed sockets), names that process; else tells the others
    (which stop too, naming this one). Ends the process with status 1."""
    traceback.print_exc()
    sys.stderr.flush()
    # A lost process's connection closed with the sockets this process's
    # collective failed on; process 0's news of a third one takes a moment.
    with self._read_lock:
      readable, _, _ = select.select([c.sock for c in self._connections],
                                     [], [], 2.0)
      for connection in list(self._connections):
        if connection.sock in readable:
          self._read(connection)
    with self._lock:
      self._stopping = True
      for connection in self._connections:
        connection.send(f"failed {self.index}")
      print(f"Process {self.index} of {self.count} stopped on the error "
            "above; the job's other processes stop too. " + RESUME_HINT,
            file=sys.stderr, flush=True)
    os._exit(EXIT_STATUS)  # pylint: disable=protected-access


# This process's watch (None outside a multi-process job or when off).
_active: Watch | None = None


def start(timeout_s: int, connect_timeout_s: float) -> Watch | None:
  """Starts this process's watch in a multi-process job (after
  jax.distributed.initialize); None in one process or when timeout_s is 0
  (--lost_host_timeout_s)."""
  global _active
  if jax.process_count() == 1 or not timeout_s:
    return None
  watch = Watch(jax.process_index(), jax.process_count(), timeout_s)
  watch.connect(distributed.global_state.client,
                distributed.global_state.coordinator_address,
                connect_timeout_s)
  _active = watch
  return watch


def end(how: str) -> None:
  """`Watch.end` of this process's watch, if any."""
  if _active is not None:
    _active.end(how)


def exit_on_error() -> None:
  """`Watch.exit_on_error` of this process's watch; without one, prints the
  traceback and exits with status 1."""
  if _active is not None:
    _active.exit_on_error()
  traceback.print_exc()
  print("Stopped on the error above. " + RESUME_HINT, file=sys.stderr,
        flush=True)
  os._exit(EXIT_STATUS)  # pylint: disable=protected-access
