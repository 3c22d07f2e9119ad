"""A parse worker: a forked process that reads and parses session files
while the refreshing process writes the rows it sends.

Parsing is pure Python and writing is mostly SQLite, so on two or more
cores the two overlap. The worker only reads files; it never touches the
catalog (it inherits the parent's connection object but never uses it, and
it leaves through ``os._exit``, so nothing of SQLite's is closed or
checkpointed from the child). Rows travel through a pipe, one batch at a
time, as length-prefixed frames: the pipe blocks the worker when the writer
falls behind, so memory stays bounded by a batch or two. A bare ``os.fork``
and pipe, not multiprocessing, whose imports alone cost a cold refresh
~20 ms.
"""

from __future__ import annotations

import fcntl
import marshal
import os
import pickle
import signal
import struct
import sys
import threading

from ..errors import TxdbError
from .lines import READ_BUFFER, head_tail, read_lines
from .fts import SidecarWriter
from .rows import FileIngest, RowBatch

# Fresh bytes below this are parsed in-process: forking costs more than it saves.
WORTH_IT_BYTES = 4 << 20
PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged pipe


def available() -> bool:
    """Forking is cheap and safe here (Linux, and no other thread that could
    hold a lock the child would need), and this process may run on two cores
    or more."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork") or threading.active_count() > 1:
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) >= 2


_HEADER = struct.Struct("<Q")


class _PipeWriter:
    def __init__(self, fd: int):
        self.fd = fd

    def send_bytes(self, data) -> None:
        header = _HEADER.pack(len(data))
        if len(data) < 65536:
            self._write_all(memoryview(header + data))
        else:  # no copy of a large frame just to prefix it
            self._write_all(memoryview(header))
            self._write_all(memoryview(data))

    def _write_all(self, view: memoryview) -> None:
        while view:
            view = view[os.write(self.fd, view):]

    def close(self) -> None:
        os.close(self.fd)


class _PipeReader:
    def __init__(self, fd: int):
        self.fd = fd

    def _read_exactly(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = os.readv(self.fd, [view[got:]])
            if k == 0:
                raise EOFError
            got += k
        return buf

    def recv_bytes(self):
        (n,) = _HEADER.unpack(self._read_exactly(_HEADER.size))
        return self._read_exactly(n)

    def close(self) -> None:
        os.close(self.fd)


def _send(conn, message: tuple) -> None:
    conn.send_bytes(marshal.dumps(message))


def _send_rows(conn, b: RowBatch) -> None:
    # marshal: the rows are tuples of str, int, bytes and None, which it
    # packs about 1.5x faster than pickle; the raw bytes go as they are.
    _send(conn, ("rows", (b.records, b.blocks, b.attachments, b.usage, b.errors, b.block_rowids)))
    conn.send_bytes(b.raw)


class _Rows:
    """The worker's sink: numbers the blocks and indexes their text into
    the full-text sidecar (bulk builds), then sends the batch."""

    def __init__(self, out, sidecar: SidecarWriter | None):
        self.out = out
        self.sidecar = sidecar
        self.next_rowid = 1

    def __call__(self, b: RowBatch) -> None:
        if self.sidecar is not None and b.blocks:
            first = self.next_rowid
            b.blocks = [(first + i, *row) for i, row in enumerate(b.blocks)]
            b.block_rowids = True
            self.next_rowid = first + len(b.blocks)
            self.sidecar.add([(row[0], row[-1]) for row in b.blocks])
        _send_rows(self.out, b)


def _parse_files(tasks, out, fts_sidecar: tuple[str, str] | None = None) -> None:
    """The worker: for each (path, file_id, kind), its row batches and then
    ("end", summary, cursor, next_line, hashes), or ("skip", reason or None
    when the file vanished), also after some of its rows; at the end
    ("done",). ``fts_sidecar``: (path, CREATE statement) of the full-text
    sidecar to index the blocks into."""
    try:
        sidecar = SidecarWriter(*fts_sidecar) if fts_sidecar else None
        sink = _Rows(out, sidecar)
        for path, file_id, kind in tasks:
            try:
                fh = open(path, "rb", buffering=READ_BUFFER)
            except FileNotFoundError:
                _send(out, ("skip", None))
                continue
            except OSError as e:
                _send(out, ("skip", e.strerror or type(e).__name__))
                continue
            with fh:
                try:
                    ing = FileIngest(file_id, kind, sink, True, pack_raw=True)
                    cursor, next_line = 0, 1
                    for line in read_lines(fh, 0, 1):
                        ing.add_line(line)
                        cursor = line.offset + line.length
                        next_line = line.number + 1
                    summary = ing.finish()
                    hashes = head_tail(fh, cursor)
                except BrokenPipeError:
                    raise
                except OSError as e:  # this file only; the writer drops what it sent
                    _send(out, ("skip", e.strerror or type(e).__name__))
                    continue
                except Exception as e:
                    _send(out, ("skip", f"could not be indexed: {type(e).__name__}: {e}"))
                    continue
                _send(out, ("end", pickle.dumps(summary), cursor, next_line, hashes))
        if sidecar is not None:
            sidecar.finish()
        _send(out, ("done",))
    except BrokenPipeError:
        pass  # the writer stopped early (an error, or Ctrl-C): nothing to do
    except BaseException as e:  # report, never a traceback from the child
        try:
            _send(out, ("fail", f"{type(e).__name__}: {e}"))
        except BrokenPipeError:
            pass
    finally:
        out.close()


class WorkerFailed(TxdbError):
    pass


class ParseWorker:
    """Context manager around the worker process; ``parts()`` yields the
    next file's messages, rows as RowBatch."""

    def __init__(self, tasks: list[tuple[str, int, str]], fts_sidecar: tuple[str, str] | None = None):
        r, w = os.pipe()
        try:  # a wider pipe: fewer round trips per batch
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except (OSError, AttributeError):
            pass
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                os.close(r)
                _parse_files(tasks, _PipeWriter(w), fts_sidecar)
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        self.pid = pid
        self.exitcode: int | None = None
        self._recv = _PipeReader(r)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._recv.close()
        if exc[0] is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reap()

    def _reap(self) -> None:
        if self.exitcode is None:
            _, status = os.waitpid(self.pid, 0)
            self.exitcode = os.waitstatus_to_exitcode(status)

    def _next(self):
        try:
            message = marshal.loads(self._recv.recv_bytes())
            if message[0] == "rows":
                records, blocks, attachments, usage, errors, block_rowids = message[1]
                return ("rows", RowBatch(records, blocks, attachments, usage, errors,
                                         self._recv.recv_bytes(), block_rowids))
        except EOFError:
            self._reap()
            raise WorkerFailed(f"the parse worker exited (code {self.exitcode})") from None
        if message[0] == "fail":
            raise WorkerFailed(f"the parse worker failed: {message[1]}")
        if message[0] == "end":
            return ("end", pickle.loads(message[1]), *message[2:])
        return message

    def finish(self) -> None:
        """After the last file: the worker's final word."""
        message = self._next()
        if message[0] != "done":
            raise WorkerFailed(f"the parse worker sent {message[0]!r} after the last file")

    def parts(self):
        """One file's messages: rows..., then end (or a lone skip)."""
        while True:
            message = self._next()
            yield message
            if message[0] != "rows":
                return
