"""The folder layout is the architecture (driver/, dialects/, runtime/,
accelerators/), yet everything installs under the single import name `tcc`:
each top-level folder is mapped onto a subpackage, and its subfolders follow."""
import os

from setuptools import setup

ROOTS = {
    "tcc": "tcc",
    "tcc.driver": "driver",
    "tcc.dialects": "dialects",
    "tcc.runtime": "runtime",
    "tcc.accelerators": "accelerators",
}


def _packages():
    found = []
    for pkg, folder in ROOTS.items():
        for dirpath, dirnames, files in os.walk(folder):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))]
            if "__init__.py" in files:
                rel = os.path.relpath(dirpath, folder)
                found.append(pkg if rel == "." else pkg + "." + rel.replace(os.sep, "."))
    return found


setup(packages=_packages(), package_dir=ROOTS,
      package_data={"": ["*.c", "*.h", "*.json", "*.cu"]})
