"""ActiveDeviceGuard (OneFlow's RAII guard) as a context manager."""
from .errors import DeviceError

_UNSET = object()


class ActiveDeviceGuard:
    """Within `with ActiveDeviceGuard(device):` the calling thread's active device of
    that type is `device`; on exit the previously active one is restored, also on error."""

    def __init__(self, device):
        self._device = device
        self._saved = _UNSET

    def __enter__(self):
        if self._saved is not _UNSET:
            raise DeviceError(f"{self._device}: ActiveDeviceGuard entered twice")
        self._saved = self._device.manager.active_index
        self._device.set_as_active()
        return self._device

    def __exit__(self, *exc):
        saved, self._saved = self._saved, _UNSET
        self._device.manager.set_active_index(saved)
