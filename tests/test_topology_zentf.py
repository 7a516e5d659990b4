"""zentf detection on a fake site-packages tree (real files, no zentf, no TensorFlow import)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess


from tf_autopar.cli.inspect_cmd import format_report, report
from tf_autopar.runtime.cache import topology_key
from tf_autopar.topology import ZentfPlugin, detect_topology, detect_zentf
from tf_autopar.topology.zentf import PLUGGABLE_PATH_VAR, PLUGIN_DIR, PLUGIN_LIBRARY

GCC = shutil.which("gcc") or shutil.which("cc")
BUILD_INFO = '__zentf_commit__ = "307737e"\n__zendnn_version__ = "v5.2.2"\n__tf_version__ = "2.21.0"\n'


def fake_site(tmp_path, plugin_bytes: bytes | None = b"not an ELF file", metadata: bool = True):
    """site-packages as `pip install zentf` lays it out: the plugin library, the zentf package with
    its generated build info, and the distribution's metadata."""
    site = tmp_path / "site-packages"
    (site / PLUGIN_DIR).mkdir(parents=True)
    (site / PLUGIN_DIR / "__init__.py").write_text("")
    if plugin_bytes is not None:
        (site / PLUGIN_DIR / PLUGIN_LIBRARY).write_bytes(plugin_bytes)
    (site / "zentf").mkdir()
    (site / "zentf" / "__init__.py").write_text("raise ImportError('never imported by the detection')\n")
    (site / "zentf" / "_build_info.py").write_text(BUILD_INFO)
    if metadata:
        info = site / "zentf-2.21.0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.4\nName: zentf\nVersion: 2.21.0.0\n")
    return site


def test_found_with_its_version_and_zendnn_from_the_files(tmp_path):
    site = fake_site(tmp_path)
    found = detect_zentf([str(tmp_path / "elsewhere"), str(site)], env={})
    assert found == ZentfPlugin(
        version="2.21.0.0",
        plugin=str(site / PLUGIN_DIR / PLUGIN_LIBRARY),
        zendnn="v5.2.2",
        tf_version="2.21.0",
        openmp="",  # not an ELF file: its runtime unknown, so no KMP_* extras are planned
    )
    assert not found.llvm_openmp
    assert found.describe().startswith("zentf 2.21.0.0 (ZenDNN v5.2.2, built for TensorFlow 2.21.0)")


def test_the_plugins_openmp_runtime_is_read_from_its_elf_file(tmp_path, need_tool):
    need_tool("gcc", "cc")
    libs = tmp_path / "solib"
    libs.mkdir()
    (tmp_path / "omp.c").write_text("int omp_get_max_threads(void){return 1;}\n")
    (tmp_path / "plugin.c").write_text("int omp_get_max_threads(void);\nint k(void){return omp_get_max_threads();}\n")
    run = dict(check=True, capture_output=True, timeout=120)
    subprocess.run([GCC, "-shared", "-fPIC", str(tmp_path / "omp.c"), "-o", str(libs / "libiomp5.so")], **run)
    site = fake_site(tmp_path, plugin_bytes=None)
    plugin = site / PLUGIN_DIR / PLUGIN_LIBRARY
    subprocess.run(
        [GCC, "-shared", "-fPIC", str(tmp_path / "plugin.c"), "-o", str(plugin), f"-L{libs}", "-liomp5"], **run
    )
    found = detect_zentf([str(site)], env={})
    assert found is not None and found.openmp == "libiomp5.so" and found.llvm_openmp


def test_absent_without_the_plugin_library_or_without_tensorflow(tmp_path):
    bare = fake_site(tmp_path, plugin_bytes=None)  # the zentf package alone: TF loads nothing
    assert detect_zentf([str(bare)], env={}) is None
    other = tmp_path / "other"
    site = fake_site(other)
    assert detect_zentf([str(site)], env={}, tf_installed=False) is None


def test_the_pluggable_device_path_variable_counts_and_metadata_may_be_missing(tmp_path):
    site = fake_site(tmp_path, metadata=False)
    found = detect_zentf([], env={PLUGGABLE_PATH_VAR: str(site / PLUGIN_DIR)})
    assert found is not None and found.version == "unknown" and found.zendnn == "v5.2.2"
    assert detect_zentf([], env={PLUGGABLE_PATH_VAR: str(site / PLUGIN_DIR / PLUGIN_LIBRARY)}) == found
    assert detect_zentf([], env={PLUGGABLE_PATH_VAR: str(site / "zentf" / "_build_info.py")}) is None


def test_inspect_names_the_plugin_and_the_plan_cache_tells_it_apart(tmp_path, host_root):
    found = detect_zentf([str(fake_site(tmp_path))], env={})
    d = report(host_root("this-host-2c"))
    d["zentf"] = dataclasses.asdict(found)
    for on, state in ((True, "on (TF_ENABLE_ZENDNN_OPTS): ZenDNN's OpenMP teams are planned"), (False, "off:")):
        d["zentf_on"] = on
        line = next(x for x in format_report(d).splitlines() if x.strip().startswith("zentf"))
        assert "zentf 2.21.0.0 (ZenDNN v5.2.2" in line and state in line
    d["zentf"] = None
    assert "not installed" in format_report(d)
    topo = detect_topology(host_root("this-host-2c"), cpu_details=False)
    with_zentf = dataclasses.replace(topo, zentf=found)
    without = dataclasses.replace(topo, zentf=None)
    assert topology_key(with_zentf) != topology_key(without)
