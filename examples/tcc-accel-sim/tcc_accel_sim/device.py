"""The sim device: memory is numpy arrays in sim's own space (a copy in or
out is a real copy), streams are worker threads (tcc.runtime's), all from
tcc.accelerators.numpy_kit."""
from tcc.accelerators.numpy_kit import NumpyDevice, NumpyFactory


class SimDevice(NumpyDevice):
    device_name = "sim (numpy)"


class SimFactory(NumpyFactory):
    device_type = "sim"
    device_class = SimDevice
