"""Artifacts that cannot hurt the loader: extra members with absolute or
`..` names or not in the manifest, duplicates, and members that inflate far
beyond their caps are refused with one line naming the artifact and the
member, without inflating them."""
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

import tcc
from tcc.runtime import artifact as A

from ..conftest import assert_one_line_error, run_tool
from .models import reference, relu_model


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return tcc.compile(relu_model(), output=str(tmp_path_factory.mktemp("a") / "good.tcc"))


def _copy_with(src, dst, extra=(), replace=None, method=zipfile.ZIP_DEFLATED):
    """A copy of artifact `src` with extra members (name, bytes) and some
    members' bytes replaced ({name: bytes})."""
    replace = replace or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for i in zin.infolist():
            zout.writestr(i, replace.get(i.filename, zin.read(i.filename)))
        for name, data in extra:
            zout.writestr(zipfile.ZipInfo(name), data, method)
    return dst


def test_good_artifact_still_loads(good, rng):
    x = rng.standard_normal(8).astype(np.float32)
    np.testing.assert_array_equal(tcc.load(good).run({"x": x})[0], reference(relu_model(), {"x": x})[0])


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("name,needle", [
    ("../../x", "absolute or '..' name"),
    ("/abs/x", "absolute or '..' name"),
    ("a/../../x", "absolute or '..' name"),
    ("C:\\evil", "absolute or '..' name"),
    ("extra.bin", "is not listed in the manifest"),
    ("host.o", "appears twice"),
])
def test_hostile_member_is_refused(good, tmp_path, name, needle):
    bad = _copy_with(good, tmp_path / "bad.tcc", extra=[(name, b"payload")])
    with pytest.raises(A.ArtifactError, match="bad.tcc"):
        tcc.load(bad)
    r = run_tool("tcc-run", bad, "--random-inputs")
    err = assert_one_line_error(r, "bad.tcc", needle)
    assert repr(name) in err or name in err


BOMB_SCRIPT = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a bomb read whole would die here
    import tcc
    from tcc.dialects.ir.errors import TccError
    try:
        tcc.load(sys.argv[1])
    except TccError as e:
        print(e)
        sys.exit(1)
""")


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("member,size", [("manifest.json", 1 << 30), ("host.o", 1 << 30)])
def test_inflation_bomb_is_refused_from_the_central_directory(good, tmp_path, member, size):
    bad = tmp_path / "bomb.tcc"
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(bad, "w") as zout:
        for i in zin.infolist():
            if i.filename == member:
                continue
            zout.writestr(i, zin.read(i.filename))
        zi = zipfile.ZipInfo(member)
        zi.compress_type = zipfile.ZIP_DEFLATED
        with zout.open(zi, "w", force_zip64=True) as f:
            block = b"{" * (1 << 20)
            for _ in range(size >> 20):
                f.write(block)
    assert bad.stat().st_size < (8 << 20)
    r = subprocess.run([sys.executable, "-c", BOMB_SCRIPT, str(bad)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, (r.returncode, r.stderr[-1500:])
    assert "bomb.tcc" in r.stdout and repr(member) in r.stdout and "inflates to" in r.stdout


def test_reading_stops_past_the_declared_size(good):
    # A central directory that understates a member's size cannot make the
    # chunked reader inflate more than it declared.
    with zipfile.ZipFile(good) as z:
        real = z.getinfo("host.o").file_size
        assert len(A._read_member(good, z, "host.o", real)) == real
        with pytest.raises(A.ArtifactError, match="'host.o' inflates beyond its declared 100 bytes"):
            A._read_member(good, z, "host.o", 100)
