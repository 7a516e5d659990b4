"""tf_autopar: CPU thread auto-configuration for TensorFlow."""
from setuptools import find_packages, setup

setup(
    name="tf_autopar",
    version="0.1.0",
    description="Plans and applies TensorFlow CPU thread settings from host topology and model width",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["tf_autopar", "tf_autopar.*", "workloads", "workloads.*"]),
    package_data={"tf_autopar": ["py.typed"], "tf_autopar.tracing": ["native_src/*"]},
    install_requires=[
        "tensorflow-cpu==2.21.0",
        "numpy>=1.26",
        "psutil>=5.9",
        "py-cpuinfo>=9.0",
        "filelock>=3.12",
    ],
    extras_require={
        "test": ["pytest>=8", "hypothesis>=6.100", "pytest-timeout>=2.3"],
        "plot": ["matplotlib>=3.8"],
    },
    entry_points={"console_scripts": ["tf-autopar=tf_autopar.cli.main:main"]},
)
