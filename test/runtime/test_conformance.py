"""The device conformance kit on the device --tcc-device names (the host by default)."""
from tcc.runtime.conformance import tcc_device  # noqa: F401  (the fixture)
from tcc.runtime.device.conformance_suite import *  # noqa: F401,F403
