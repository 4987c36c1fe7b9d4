"""The runtime's exceptions: one for devices, one for target descriptions."""


class DeviceError(RuntimeError):
    """A device operation failed or was misused; the message names the device."""


class TargetError(ValueError):
    """A target description names an unknown kind or attribute, or a wrong type."""
