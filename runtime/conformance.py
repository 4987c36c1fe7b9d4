"""pytest plugin for the device conformance kit (tests in tcc.runtime.device.conformance_suite).

Run the kit on any registered device:

    pytest -p tcc.runtime.conformance --tcc-device=gpu:0 --pyargs tcc.runtime.device.conformance_suite

Inside this repository `pytest test/runtime` runs it on the host; with the plugin
loaded, `--tcc-device` moves those same tests to another device.
"""
import pytest

from tcc.runtime.device import get_device

DEFAULT_DEVICE = "cpu"


def pytest_addoption(parser):
    parser.getgroup("tcc").addoption(
        "--tcc-device", default=None, metavar="TYPE[:INDEX]",
        help=f"device the tcc conformance kit runs on (default: {DEFAULT_DEVICE})")


def pytest_report_header(config):
    return f"tcc conformance device: {_spec(config)}"


@pytest.fixture(scope="session")
def tcc_device(request):
    """The device under test, from --tcc-device (the host when absent). A
    device type no one registered yet is looked up as an accelerator plugin
    of that name, whose device factory registers it."""
    spec = _spec(request.config)
    dtype = spec.split(":")[0]
    from tcc.runtime.device import default_registry
    if dtype not in default_registry:
        from tcc.accelerators.manager import load_accelerators
        load_accelerators([dtype])
    return get_device(spec)


def _spec(config):
    # getoption's default covers runs where this module supplies the fixture but was
    # not loaded as a plugin, so the option was never registered.
    return config.getoption("tcc_device", default=None) or DEFAULT_DEVICE
