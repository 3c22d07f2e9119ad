"""Run catalog writes in order, optionally on a background thread.

sqlite3 releases the GIL while SQLite works (B-tree inserts, the full-text
trigger), so a refresh parses the next lines on the main thread while the
previous batch is written. Writes still happen one at a time, in the order
they were submitted, on one connection; the main thread never touches the
connection while the writer thread owns it.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from typing import Callable

Job = Callable[[sqlite3.Connection], None]

_STOP = object()


class Writer:
    def __init__(self, conn: sqlite3.Connection, threaded: bool = False, depth: int = 8):
        self.conn = conn
        self.error: BaseException | None = None
        self._thread = None
        if threaded:
            # A bounded queue keeps memory bounded: the parser waits when the
            # writer falls behind.
            self._queue: queue.Queue = queue.Queue(maxsize=depth)
            self._thread = threading.Thread(target=self._run, name="txdb-writer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is _STOP:
                    return
                if self.error is None:
                    job(self.conn)
            except BaseException as e:  # handed to the main thread
                self.error = e
            finally:
                self._queue.task_done()

    def submit(self, job: Job) -> None:
        """Run ``job(conn)`` after every job submitted before it."""
        self._raise()
        if self._thread is None:
            job(self.conn)
        else:
            self._queue.put(job)

    def drain(self) -> None:
        """Wait until every submitted job ran; re-raise the first failure."""
        if self._thread is not None:
            self._queue.join()
        self._raise()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join()
            self._thread = None

    def _raise(self) -> None:
        if self.error is not None:
            err, self.error = self.error, None
            raise err
