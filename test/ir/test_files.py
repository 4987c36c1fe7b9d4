"""atomic_open, under every output tcc writes: whole or nothing, and two
writers of one path (two `tcc -o same.tcc` at once) both succeed."""
import os
import stat

import pytest

from tcc.dialects.ir.files import atomic_open, umask


def test_interleaved_writers_of_one_path_both_succeed_and_last_wins(tmp_path, rng):
    p = tmp_path / "out.bin"
    a, b = rng.bytes(1000), rng.bytes(1000)
    with atomic_open(p) as fa:
        fa.write(a)
        with atomic_open(p) as fb:  # a second process starting before the first renamed
            fb.write(b)
    assert p.read_bytes() == a  # fa's rename came last
    assert os.listdir(tmp_path) == ["out.bin"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, rng):
    p = tmp_path / "out.txt"
    old = rng.bytes(64)
    p.write_bytes(old)
    with pytest.raises(ZeroDivisionError):
        with atomic_open(p) as f:
            f.write(b"partial")
            1 / 0
    assert p.read_bytes() == old
    assert os.listdir(tmp_path) == ["out.txt"]


def test_the_file_gets_the_umask_mode_not_mkstemps_0600(tmp_path):
    p = tmp_path / "m"
    with atomic_open(p, "w") as f:
        f.write("x")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o666 & ~umask()
