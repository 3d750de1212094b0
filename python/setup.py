"""Builds braid's extension module with the repository's CMake build, for
`pip install --no-build-isolation ./python` (docs/python.md).

The module is the CMake target _braid, built in the repository's build folder (BUILD_DIR, default
`build`, the one `make build` uses, so that a built tree is reused) and copied into the package.
BRAID_SOURCE_DIR names the repository when this folder is a copy.
With BRAID_PYTHON_MODULE set to an already built _braid*.so, that file is packaged as it is.
"""
import os
import pathlib
import shutil
import subprocess
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The repository (this folder's parent, or BRAID_SOURCE_DIR when the package is built from a copy).
ROOT = pathlib.Path(os.environ.get("BRAID_SOURCE_DIR", pathlib.Path(__file__).resolve().parent.parent))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        built = os.environ.get("BRAID_PYTHON_MODULE")
        if built:
            built = pathlib.Path(built)
        else:
            build = pathlib.Path(os.environ.get("BUILD_DIR", ROOT / "build"))
            if not build.is_absolute():
                build = ROOT / build
            subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build),
                                   "-DCMAKE_BUILD_TYPE=Release"])
            subprocess.check_call(["cmake", "--build", str(build), "--target", "_braid",
                                   "-j", os.environ.get("JOBS", "2")])
            found = sorted((build / "python" / "braid").glob("_braid*.so"))
            if not found:
                raise RuntimeError(f"the build in {build} made no _braid module: is pybind11-dev "
                                   "installed (scripts/bootstrap.sh)?")
            built = found[0]
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        if not built.name.endswith(suffix):
            raise RuntimeError(f"{built.name} was built for another Python than this one "
                               f"(which loads *{suffix}): build it with this interpreter")
        dest = pathlib.Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, dest)


setup(ext_modules=[Extension("braid._braid", sources=[])], cmdclass={"build_ext": CMakeBuild})
