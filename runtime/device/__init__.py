"""Runtime devices: one device API (TVM's DeviceAPI merged with OneFlow's EP),
targets, DLPack tensors, and the host implementation.

A new device type is a DeviceManagerFactory, a DeviceManager and a Device
subclass implementing the underscored hooks (see host.py, or reuse worker.py's
streams for devices whose work runs as host code), registered with
`register_device_factory`.
"""
from .attrs import DeviceAttr
from .buffer import DeviceBuffer
from .device import Device
from .errors import DeviceError, TargetError
from .guard import ActiveDeviceGuard
from .host import HostDevice, HostDeviceManager, HostDeviceManagerFactory
from .manager import DeviceManager, DeviceManagerFactory
from .options import AllocationOptions
from .registry import (DeviceManagerRegistry, default_registry, get_device,
                       parse_device_spec, register_device_factory)
from .stream import Event, Stream
from .target import Target
from .target_kind import TargetKind, get_target_kind, register_target_kind, target_kinds
from .tensor import Tensor
from .worker import WorkerEvent, WorkerStream

__all__ = [
    "ActiveDeviceGuard", "AllocationOptions", "Device", "DeviceAttr", "DeviceBuffer",
    "DeviceError", "DeviceManager", "DeviceManagerFactory", "DeviceManagerRegistry", "Event",
    "HostDevice", "HostDeviceManager", "HostDeviceManagerFactory", "Stream", "Target",
    "TargetError", "TargetKind", "Tensor", "WorkerEvent", "WorkerStream", "default_registry",
    "get_device", "get_target_kind", "parse_device_spec", "register_device_factory",
    "register_target_kind", "target_kinds",
]
