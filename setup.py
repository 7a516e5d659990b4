"""tf_autopar: CPU thread auto-configuration for TensorFlow."""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py as _build_py

HERE = Path(__file__).resolve().parent


class build_py(_build_py):
    """Ship native/ (the op tracer's C++ source, built on first use) as tf_autopar/tracing/native_src/."""

    def run(self) -> None:
        super().run()
        dst = Path(self.build_lib) / "tf_autopar" / "tracing" / "native_src"
        dst.mkdir(parents=True, exist_ok=True)
        for f in sorted((HERE / "native").iterdir()):
            if f.suffix in (".cc", ".h", ".sh"):
                shutil.copy2(f, dst / f.name)


setup(
    name="tf_autopar",
    version="0.1.0",
    description="Plans and applies TensorFlow CPU thread settings from host topology and model width",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["tf_autopar", "tf_autopar.*", "tf_autopar_workloads", "tf_autopar_workloads.*"]),
    package_data={"tf_autopar": ["py.typed"], "tf_autopar.tracing": ["native_src/*"]},
    # TensorFlow is an extra, not a requirement: a user's own build (tensorflow, intel-tensorflow,
    # tensorflow-cpu of another version) would otherwise get tensorflow-cpu installed over it,
    # both writing site-packages/tensorflow.
    install_requires=[
        "numpy>=1.26",
        "psutil>=5.9",
        "py-cpuinfo>=9.0",
        "filelock>=3.12",
    ],
    extras_require={
        "tensorflow": ["tensorflow-cpu==2.21.0"],  # the build the bundled workloads and the figures use
        "plots": ["matplotlib>=3.8"],  # the PNG charts of `validate --plot` and `analyze --plot`
        # the fast path's other engines (runtime/fastpath/engines): OpenVINO, ONNX Runtime via tf2onnx
        "engines": ["openvino>=2025.0", "onnxruntime>=1.18", "tf2onnx>=1.16"],
        "characterize": ["scipy>=1.11", "matplotlib>=3.8"],  # `tf-autopar characterize`: clustering, figures
        # the serving example and its tests: FastAPI under gunicorn/uvicorn, Ray Serve on a local cluster
        "serve": ["fastapi>=0.110", "uvicorn>=0.29", "gunicorn>=22", "ray[serve]>=2.40"],
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5",
            "hypothesis>=6.100",
            "matplotlib>=3.8",
            "scipy>=1.11",
            "ruff==0.17.6",
        ],  # the tests draw and cluster too; ruff lints
    },
    cmdclass={"build_py": build_py},
    entry_points={"console_scripts": ["tf-autopar=tf_autopar.cli.main:main"]},
)
