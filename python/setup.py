"""Build and install the mooncake Python package (Mooncake-C bindings).

The extension modules are plain C against the CPython API and are built by the project's CMake
build, then copied here together with libmooncake.so (the modules find it through an $ORIGIN
rpath) and the programs behind the console scripts (PROGRAMS, into mooncake/bin/; they link
only system libraries, see mooncake/cli.py). Two ways:

* default: configure and build the repository (the parent of this directory, or
  $MOONCAKE_SOURCE_DIR) in a private build directory with -DMC_PYTHON_RPATH_ORIGIN_ONLY=ON
  ($MOONCAKE_BUILD_JOBS parallel jobs, default 1);
* MOONCAKE_BUILD_DIR=/path/to/existing/build: reuse modules, libmooncake.so and programs
  already built there (`cmake --build <dir> --target mooncake_python mooncake_master
  mooncake_client transfer_engine_bench mooncake_http_metadata_server`, or the whole build).

No network access is needed: install with --no-build-isolation (see README.md).
"""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = ("_core", "_engine", "_store")
# C programs behind the console scripts ([project.scripts] in pyproject.toml, mooncake/cli.py).
PROGRAMS = ("mooncake_master", "mooncake_client", "transfer_engine_bench",
            "mooncake_http_metadata_server")


class CMakeBuild(build_ext):
    """Builds (or reuses) the CMake outputs and copies them into the package."""

    def run(self):
        build_dir = os.environ.get("MOONCAKE_BUILD_DIR")
        if build_dir:
            build_dir = os.path.abspath(build_dir)
        else:
            build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
            self._cmake(build_dir)
        self._mc_build_dir = build_dir
        super().run()
        lib = os.path.join(build_dir, "lib", "libmooncake.so")
        if not os.path.exists(lib):
            raise RuntimeError(f"{lib} not found: build the 'mooncake' target first")
        dest = os.path.join(self.build_lib, "mooncake")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(lib, os.path.join(dest, "libmooncake.so"))
        if self.inplace:
            shutil.copy2(lib, os.path.join(HERE, "mooncake", "libmooncake.so"))
        self._copy_programs(build_dir, os.path.join(dest, "bin"))
        if self.inplace:
            self._copy_programs(build_dir, os.path.join(HERE, "mooncake", "bin"))

    def _copy_programs(self, build_dir, dest):
        missing = [p for p in PROGRAMS if not os.path.isfile(os.path.join(build_dir, "bin", p))]
        if missing:
            raise RuntimeError(f"{', '.join(missing)} not found in {build_dir}/bin: build "
                               f"those targets first (cmake --build {build_dir})")
        os.makedirs(dest, exist_ok=True)
        for p in PROGRAMS:
            shutil.copy2(os.path.join(build_dir, "bin", p), os.path.join(dest, p))
            os.chmod(os.path.join(dest, p), 0o755)

    def _cmake(self, build_dir):
        src = os.environ.get("MOONCAKE_SOURCE_DIR") or os.path.dirname(HERE)
        if not os.path.exists(os.path.join(src, "CMakeLists.txt")):
            raise RuntimeError(f"no CMakeLists.txt in {src}; set MOONCAKE_SOURCE_DIR")
        jobs = os.environ.get("MOONCAKE_BUILD_JOBS", "1")
        subprocess.check_call([
            "cmake", "-S", src, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            "-DMC_PYTHON_RPATH_ORIGIN_ONLY=ON", f"-DMC_PYTHON3={sys.executable}"])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "mooncake_python",
                               *PROGRAMS, "-j", jobs])

    def build_extension(self, ext):
        name = ext.name.split(".")[-1]
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = os.path.join(self._mc_build_dir, "python", "mooncake", name + suffix)
        if not os.path.exists(built):
            found = glob.glob(os.path.join(self._mc_build_dir, "python", "mooncake",
                                           name + ".*.so"))
            if not found:
                raise RuntimeError(f"{built} not found in the CMake build")
            built = found[0]
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copy2(built, out)


setup(
    packages=["mooncake"],
    ext_modules=[Extension(f"mooncake.{m}", sources=[]) for m in MODULES],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
