"""Streams that run on a worker thread, for devices whose work is host code
(the host itself, numpy-backed simulators).

Model: every stream owns one daemon thread draining a FIFO queue, so work is
asynchronous to the submitting thread and ordered within a stream; streams run
concurrently with each other. Events count records and completions, so a
re-recorded event is waited on by its latest record, as in CUDA.
"""
import queue
import threading
import weakref

from .errors import DeviceError
from .stream import Event, Stream

_STOP = object()


class WorkerEvent(Event):
    """An event completed by a worker stream."""

    def __init__(self, device):
        super().__init__(device)
        self._cond = threading.Condition()
        self._recorded = 0
        self._completed = 0

    def query_done(self):
        self.check_alive()
        with self._cond:
            return self._completed >= self._recorded

    def sync(self):
        self.check_alive()
        with self._cond:
            target = self._recorded
        self._wait_for(target)

    def _new_record(self):
        with self._cond:
            self._recorded += 1
            return self._recorded

    def _latest_record(self):
        with self._cond:
            return self._recorded

    def _complete(self, generation):
        with self._cond:
            self._completed = max(self._completed, generation)
            self._cond.notify_all()

    def _wait_for(self, generation):
        with self._cond:
            self._cond.wait_for(lambda: self._completed >= generation)


class _Pending:
    """Tasks queued and not finished yet: sync() on an idle stream returns
    without a round trip through the worker thread (two thread switches,
    most of a small model's run time on a host device)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.n = 0


def _drain(tasks, errors, pending):
    while True:
        task = tasks.get()
        if task is _STOP:
            return
        try:
            task()
        except BaseException as exc:  # reported by the next sync(), like a CUDA sticky error
            errors.append(exc)
        finally:
            with pending.lock:
                pending.n -= 1


class WorkerStream(Stream):
    """A stream whose work runs in order on its own worker thread."""

    def __init__(self, device):
        super().__init__(device)
        self._tasks = queue.SimpleQueue()
        self._errors = []
        self._pending = _Pending()
        # The thread holds the queue, not the stream, so a dropped stream is collected
        # and the finalizer stops its thread.
        self._thread = threading.Thread(target=_drain, args=(self._tasks, self._errors, self._pending),
                                        name=f"tcc-stream-{device}", daemon=True)
        self._thread.start()
        self._stop = weakref.finalize(self, self._tasks.put, _STOP)

    def sync(self):
        self.check_alive()
        if threading.current_thread() is self._thread:
            raise DeviceError(f"{self.device}: a stream cannot sync from its own work")
        with self._pending.lock:
            idle = self._pending.n == 0
        if not idle:
            done = threading.Event()
            self._put(done.set)
            done.wait()
        if self._errors:
            first, self._errors[:] = self._errors[0], []
            raise DeviceError(f"{self.device}: work queued on a stream failed: {first!r}") from first

    def _put(self, fn):
        with self._pending.lock:
            self._pending.n += 1
        self._tasks.put(fn)

    def _launch_host_func(self, fn):
        self._put(fn)

    def _record_event(self, event):
        generation = _as_worker_event(event, self)._new_record()
        self._put(lambda: event._complete(generation))

    def _wait_event(self, event):
        generation = _as_worker_event(event, self)._latest_record()
        self._put(lambda: event._wait_for(generation))

    def _destroy(self):
        try:
            self.sync()
        finally:
            self._stop()
            self._thread.join()


def _as_worker_event(event, stream):
    if not isinstance(event, WorkerEvent):
        raise DeviceError(f"{stream.device}: a worker stream needs a WorkerEvent, "
                          f"got {type(event).__name__}")
    return event
