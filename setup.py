# The Python package sigprop (docs/python.md): its .py files are python/sigprop/,
# its extension module sigprop._sigprop the CMake target sigprop_python,
# built in the project's build directory (SIGPROP_BUILD_DIR, default build/,
# shared with README's test command) so the compiled model layer is reused.
# Install: bash scripts/quickstart.sh python (a .venv with Debian's packages).
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.path.join(ROOT, os.environ.get("SIGPROP_BUILD_DIR", "build"))
        jobs = os.environ.get("SIGPROP_JOBS", "2")
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DSIGPROP_WERROR=ON",
                        "-DSIGPROP_BUILD_PYTHON=ON"], check=True)
        subprocess.run(["cmake", "--build", build, "-j", jobs, "--target", "sigprop_python"], check=True)
        module_dir = os.path.join(build, "python", "sigprop")
        built = [f for f in os.listdir(module_dir) if f.startswith("_sigprop") and f.endswith(".so")]
        if len(built) != 1:
            raise RuntimeError(f"expected one _sigprop*.so in {module_dir}, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(module_dir, built[0]), target)


setup(
    name="sigprop",
    version="0.1.0",
    description="Closed-form signal propagation for transformers at initialization",
    license="MIT",
    package_dir={"": "python"},
    packages=["sigprop"],
    ext_modules=[Extension("sigprop._sigprop", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["numpy"],
    extras_require={"plot": ["matplotlib"]},  # sigprop.plot; Debian: python3-matplotlib
    zip_safe=False,
    # setuptools' own build files apart from CMake's
    options={"build": {"build_base": os.path.join("build", "python-package")}},
)
