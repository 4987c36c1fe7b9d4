"""Streams and events (OneFlow's Stream/Event, TVM's stream handles)."""
import abc
import threading

from .errors import DeviceError


class Event(abc.ABC):
    """A marker recorded on a stream; done once the stream has run everything
    queued before the record. An event never recorded counts as done."""

    def __init__(self, device):
        self.device = device
        self._destroyed = False

    @property
    def destroyed(self):
        return self._destroyed

    def check_alive(self):
        if self._destroyed:
            raise DeviceError(f"{self.device}: event was already destroyed")

    @abc.abstractmethod
    def query_done(self):
        """True when the work captured by the latest record has finished."""

    @abc.abstractmethod
    def sync(self):
        """Block until the work captured by the latest record has finished."""


class Stream(abc.ABC):
    """An in-order queue of work on one device. Not thread-safe: one thread
    submits to a stream at a time. As a context manager it destroys itself on exit."""

    def __init__(self, device):
        self._device = device
        self._destroyed = False
        self._saved_active = threading.local()

    @property
    def device(self):
        return self._device

    @property
    def device_type(self):
        return self._device.type

    @property
    def destroyed(self):
        return self._destroyed

    def check_alive(self):
        if self._destroyed:
            raise DeviceError(f"{self._device}: stream was already destroyed")

    @abc.abstractmethod
    def sync(self):
        """Block until everything queued so far has run; raise DeviceError if any of it failed."""

    def record_event(self, event):
        """Mark `event` not done until the work queued so far has run."""
        self._check_event(event)
        self._record_event(event)

    def wait_event(self, event):
        """Make work queued after this call wait for `event`'s latest record."""
        self._check_event(event)
        self._wait_event(event)

    def launch_host_func(self, fn):
        """Run `fn()` on the host once the work queued before it has run
        (cudaLaunchHostFunc); an exception it raises surfaces from `sync()`."""
        self.check_alive()
        self._launch_host_func(fn)

    def on_execution_context_setup(self):
        """Prepare the calling thread to submit work here: make this stream's device
        the thread's active device (cudaSetDevice), remembering the previous one."""
        self.check_alive()
        manager = self._device.manager
        stack = self._saved_active.__dict__.setdefault("stack", [])
        stack.append(manager.active_index)
        self._device.set_as_active()

    def on_execution_context_teardown(self):
        """Undo the matching `on_execution_context_setup`."""
        stack = self._saved_active.__dict__.get("stack")
        if not stack:
            raise DeviceError(f"{self._device}: execution context teardown without setup")
        self._device.manager.set_active_index(stack.pop())

    def execution_context(self):
        """A context manager pairing setup and teardown."""
        return _ExecutionContext(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self._destroyed:
            self._device.destroy_stream(self)

    def _check_event(self, event):
        self.check_alive()
        if not isinstance(event, Event):
            raise DeviceError(f"{self._device}: expected an Event, got {type(event).__name__}")
        event.check_alive()
        if event.device.type != self._device.type:
            raise DeviceError(f"{self._device}: stream cannot use an event of {event.device}")

    @abc.abstractmethod
    def _record_event(self, event):
        ...

    @abc.abstractmethod
    def _wait_event(self, event):
        ...

    @abc.abstractmethod
    def _launch_host_func(self, fn):
        ...

    @abc.abstractmethod
    def _destroy(self):
        """Finish queued work and release the backend stream."""


class _ExecutionContext:
    def __init__(self, stream):
        self._stream = stream

    def __enter__(self):
        self._stream.on_execution_context_setup()
        return self._stream

    def __exit__(self, *exc):
        self._stream.on_execution_context_teardown()
