"""The runtime: the device abstraction (runtime.device), targets, tensors,
and the compiled artifact's loader and sessions."""
from .device import (ActiveDeviceGuard, AllocationOptions, Device, DeviceAttr, DeviceBuffer,  # noqa: F401
                     DeviceError, DeviceManager, DeviceManagerFactory, DeviceManagerRegistry, Event,
                     HostDevice, HostDeviceManager, HostDeviceManagerFactory, Stream, Target, TargetError,
                     TargetKind, Tensor, WorkerEvent, WorkerStream, default_registry, get_device,
                     get_target_kind, parse_device_spec, register_device_factory, register_target_kind,
                     target_kinds)
