"""Every option `tcc --help` lists is in the README, and the README's
command examples use only options tcc has."""
import os
import re

from ..conftest import run_tool

README = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "README.md")


def test_every_tcc_option_is_in_the_readme():
    r = run_tool("tcc", "--help")
    assert r.returncode == 0, r.stderr
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", r.stdout))
    assert {"--no-cache", "--timing", "--placement-report"} <= flags
    text = open(README).read()
    assert [f for f in sorted(flags) if f not in text] == []
    assert "placement-svg" in r.stdout and "placement-svg" in text


def test_readme_tcc_examples_use_real_options():
    # the in-tree accelerators' options join once they are selected
    known = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", run_tool("tcc", "--maccel=cpu", "--maccel=gpu", "--help").stdout))
    text = open(README).read()
    used = set()
    for line in re.findall(r"^(?:TCC_\S+ )*tcc (.*)$", text, flags=re.M):
        used |= set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", line.split("#")[0]))
    assert used and sorted(used - known) == []
