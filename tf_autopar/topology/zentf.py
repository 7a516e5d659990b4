"""Whether AMD's zentf plugin (the ZenDNN TensorFlow plugin) will be loaded by TensorFlow, found
without importing either.

TensorFlow's ``__init__`` loads every shared library in ``<site-packages>/tensorflow-plugins/`` of
each site-packages directory it knows (``sys.path`` entries naming site-packages, ``site`` and
``sysconfig``'s purelib/platlib), and the library named by ``TF_PLUGGABLE_DEVICE_LIBRARY_PATH``.
zentf installs ``tensorflow-plugins/libamdcpu_plugin.so`` there, beside its ``zentf`` package (whose
``_build_info.py`` names the ZenDNN version) and its bundled LLVM OpenMP runtime. Once loaded, its
ZenDNN kernels run on that OpenMP runtime, one team per inter-op thread that runs them, whatever the
TensorFlow build: OMP_NUM_THREADS and KMP_* matter again on a stock TensorFlow.

Importing ``zentf`` would import TensorFlow (about 2.5 s, and it fixes the thread pools we plan).
"""

from __future__ import annotations

import glob
import logging
import os
import re
import site
import sys
import sysconfig
from typing import Iterable, Mapping

from .model import ZentfPlugin
from .tf_runtime import elf_needed, is_openmp_library

log = logging.getLogger("tf_autopar.topology")

PLUGIN_LIBRARY = "libamdcpu_plugin.so"
PLUGIN_DIR = "tensorflow-plugins"
DISTRIBUTIONS = ("zentf", "zentf-weekly")
PLUGGABLE_PATH_VAR = "TF_PLUGGABLE_DEVICE_LIBRARY_PATH"
_BUILD_FIELD = re.compile(r"^__(zendnn_version|tf_version)__\s*=\s*['\"]([^'\"]*)['\"]", re.MULTILINE)


def tf_plugin_dirs() -> list[str]:
    """The site-packages directories TensorFlow 2.x scans for ``tensorflow-plugins`` (its __init__)."""
    dirs: list[str] = []
    if site.ENABLE_USER_SITE and site.USER_SITE:
        dirs.append(site.USER_SITE)
    dirs += [p for p in sys.path if "site-packages" in p]
    if hasattr(site, "getsitepackages"):
        dirs += site.getsitepackages()
    for scheme in sysconfig.get_scheme_names():
        for name in ("purelib", "platlib"):
            try:
                dirs.append(sysconfig.get_path(name, scheme))
            except KeyError:
                continue
    return list(dict.fromkeys(d for d in dirs if d))


def detect_zentf(
    dirs: Iterable[str] | None = None, env: Mapping[str, str] | None = None, tf_installed: bool = True
) -> ZentfPlugin | None:
    """The zentf plugin TensorFlow would load in this interpreter, or None.

    dirs: site-packages directories to look in (default: those TensorFlow scans); env: the
    environment for TF_PLUGGABLE_DEVICE_LIBRARY_PATH (default os.environ). tf_installed=False
    (no TensorFlow to load it): None. A few stat calls; the plugin's files are read once when found.
    """
    if not tf_installed:
        return None
    env = os.environ if env is None else env
    candidates = [os.path.join(d, PLUGIN_DIR, PLUGIN_LIBRARY) for d in (tf_plugin_dirs() if dirs is None else dirs)]
    explicit = env.get(PLUGGABLE_PATH_VAR, "")
    if explicit:
        candidates.append(explicit if not os.path.isdir(explicit) else os.path.join(explicit, PLUGIN_LIBRARY))
    for path in candidates:
        if os.path.basename(path) == PLUGIN_LIBRARY and os.path.isfile(path):
            return _describe(path)
    return None


_memory: dict[tuple[str, int], ZentfPlugin] = {}


def _describe(plugin: str) -> ZentfPlugin:
    """The plugin's description, read once per file version in a process (enable() may ask often)."""
    try:
        key = (plugin, os.stat(plugin).st_mtime_ns)
    except OSError:
        key = (plugin, 0)
    if key not in _memory:
        _memory[key] = _read(plugin)
    return _memory[key]


def _read(plugin: str) -> ZentfPlugin:
    site_dir = os.path.dirname(os.path.dirname(plugin))
    build = _build_info(os.path.join(site_dir, "zentf", "_build_info.py"))
    needed = elf_needed(plugin) or []
    openmp = next((n for n in needed if is_openmp_library(n)), "")
    found = ZentfPlugin(
        version=_version(site_dir),
        plugin=plugin,
        zendnn=build.get("zendnn_version", ""),
        tf_version=build.get("tf_version", ""),
        openmp=openmp,
    )
    log.debug("zentf plugin: %s", found.describe())
    return found


def _build_info(path: str) -> dict[str, str]:
    """The fields of zentf's generated _build_info.py, read as text (importing zentf imports TF)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read(65536)
    except OSError:
        return {}
    return {m.group(1): m.group(2) for m in _BUILD_FIELD.finditer(text)}


def _version(site_dir: str) -> str:
    """The installed distribution's version from its dist-info METADATA (the dist-info's name alone
    when that is unreadable): globbing one name is much cheaper than importlib.metadata's scan of
    every distribution of the directory."""
    for name in DISTRIBUTIONS:
        for info in sorted(glob.glob(os.path.join(site_dir, name.replace("-", "_") + "-*.dist-info"))):
            try:
                with open(os.path.join(info, "METADATA"), encoding="utf-8", errors="replace") as fh:
                    for line in fh:
                        if line.startswith("Version:"):
                            return line.split(":", 1)[1].strip()
                        if not line.strip():
                            break
            except OSError:
                pass
            return os.path.basename(info)[len(name) + 1 : -len(".dist-info")]
    return "unknown"
