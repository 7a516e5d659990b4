"""Build the native tracer against the TensorFlow that is running, cached per TF version.

WHY on first use and not at install: the extension calls C++ symbols of
``libtensorflow_framework.so.2`` whose layout changes between TF releases, so it must be
compiled against the exact TF it is loaded into. Building at ``pip install`` time would
bind it to whatever TF was present then (often none yet, or a different one after an
upgrade). Building on first use against ``tf.sysconfig`` of the running TF, and caching
the result under a key made of the TF version, the sources and the compile command,
gives a correct library after any TF upgrade and costs ~10 s once per TF version.

``python -m tf_autopar.tracing.build`` (or ``tf-autopar trace --build``) prebuilds it.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tf_autopar import _files
from tf_autopar._files import write_text_atomic
from tf_autopar._paths import cache_dir

log = logging.getLogger("tf_autopar.tracing")

LIB_NAME = "libtf_autopar_trace.so"
SOURCE_NAME = "tf_autopar_trace.cc"
FAILED_MARKER = "build-failed.log"


class NativeBuildError(RuntimeError):
    """The native tracer could not be built (no compiler, compile error, no TF headers)."""


@dataclass(frozen=True)
class BuildPlan:
    """Everything that decides the library's bytes: where it goes and how it is made."""

    source: Path
    compiler: str
    command: tuple[str, ...]  # with {out} as the output placeholder
    tf_version: str
    key: str
    cache_dir: Path

    @property
    def library(self) -> Path:
        return self.cache_dir / LIB_NAME


def source_dirs() -> list[Path]:
    """Where the C++ sources may be: the installed package copy, then the repository's native/."""
    here = Path(__file__).resolve().parent
    return [here / "native_src", here.parent.parent / "native"]


def find_source() -> Path:
    for d in source_dirs():
        if (d / SOURCE_NAME).is_file():
            return d / SOURCE_NAME
    searched = ", ".join(str(d) for d in source_dirs())
    raise NativeBuildError(f"native tracer source {SOURCE_NAME} not found (searched {searched})")


def cache_root() -> Path:
    return Path(cache_dir()).expanduser()


def find_compiler() -> str | None:
    """$CXX if set (and found), else g++, else c++."""
    candidates = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "c++"]
    for c in candidates:
        parts = shlex.split(c)
        if parts and shutil.which(parts[0]):
            return c
    return None


def compile_command(
    compiler: str, source: Path, compile_flags: list[str], link_flags: list[str], extra_includes: Sequence[str] = ()
) -> list[str]:
    """The g++ command line ({out} is replaced by the output path). Pure: no side effects."""
    lib_dirs = [f[2:] for f in link_flags if f.startswith("-L")]
    rpath = [f"-Wl,-rpath,{d}" for d in lib_dirs]
    return [
        *shlex.split(compiler),
        "-shared",
        "-fPIC",
        "-O2",
        "-w",
        *compile_flags,
        *(f"-I{d}" for d in extra_includes),
        str(source),
        "-o",
        "{out}",
        *link_flags,
        *rpath,
    ]


def legacy_tsl_includes(compile_flags: Sequence[str]) -> list[str]:
    """TF 2.14 and 2.15 ship TSL's headers under include/tensorflow/tsl, not include/tsl: that
    folder joins the include path so the source's "tsl/..." includes resolve on both."""
    out = []
    for flag in compile_flags:
        inc = flag[2:] if flag.startswith("-I") else None
        if (
            inc
            and not os.path.isdir(os.path.join(inc, "tsl"))
            and os.path.isdir(os.path.join(inc, "tensorflow", "tsl"))
        ):
            out.append(os.path.join(inc, "tensorflow"))
    return out


def make_plan() -> BuildPlan:
    """Resolve source, compiler and TF flags into a cache key (imports TensorFlow)."""
    import tensorflow as tf

    source = find_source()
    compiler = find_compiler()
    if compiler is None:
        raise NativeBuildError(
            "no C++ compiler found (tried $CXX, g++, c++); install g++ (e.g. apt-get install g++) "
            "or set CXX to use the native tracer"
        )
    flags = tf.sysconfig.get_compile_flags()
    command = compile_command(compiler, source, flags, tf.sysconfig.get_link_flags(), legacy_tsl_includes(flags))
    h = hashlib.sha256()
    h.update(source.read_bytes())
    h.update("\0".join(command).replace(str(source), SOURCE_NAME).encode())
    h.update(tf.__version__.encode())
    h.update(compiler_version(compiler).encode())
    key = f"tf{tf.__version__}-{h.hexdigest()[:16]}"
    return BuildPlan(
        source=source,
        compiler=compiler,
        command=tuple(command),
        tf_version=tf.__version__,
        key=key,
        cache_dir=cache_root() / "native" / key,
    )


def compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run([*shlex.split(compiler), "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.splitlines()[0] if out.stdout else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def build(force: bool = False, plan: BuildPlan | None = None) -> Path:
    """Return the cached library for the running TF, compiling it first if needed.

    A file lock serialises concurrent builds (several processes starting at once); the
    library is written to a temporary name and renamed, so a reader never sees half a file.
    A failed build leaves ``build-failed.log`` so later processes fall back at once
    instead of recompiling; ``force=True`` retries.
    """
    from filelock import FileLock  # 30-45 ms: only a build pays for it (the CLI imports this module)

    plan = plan or make_plan()
    plan.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_owned(plan.cache_dir, directory=True)
    lib, failed = plan.library, plan.cache_dir / FAILED_MARKER
    if not force and _trusted(lib):
        return lib
    with FileLock(str(plan.cache_dir / "build.lock"), timeout=600):
        if not force and _trusted(lib):
            return lib  # another process built it while we waited
        if failed.is_file() and not force:
            raise NativeBuildError(
                f"an earlier build failed (see {failed}); retry with `tf-autopar trace --build` "
                f"or `python -m tf_autopar.tracing.build`"
            )
        fd, tmp = tempfile.mkstemp(prefix=".build-", suffix=".so", dir=plan.cache_dir)
        os.close(fd)
        cmd = [tmp if part == "{out}" else part for part in plan.command]
        log.info("building the native tracer: %s", " ".join(shlex.quote(c) for c in cmd))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as exc:
            proc = None
            err = str(exc)
        else:
            err = proc.stderr
        if proc is None or proc.returncode != 0:
            Path(tmp).unlink(missing_ok=True)
            write_text_atomic(str(failed), " ".join(shlex.quote(c) for c in cmd) + "\n\n" + err)
            tail = "\n".join(err.strip().splitlines()[-15:])
            status = f"exit status {proc.returncode}" if proc is not None else "could not run the compiler"
            raise NativeBuildError(
                f"compiling the native tracer failed ({status}; log: {failed})" + (f":\n{tail}" if tail else "")
            )
        os.chmod(tmp, 0o755)
        os.replace(tmp, lib)
        failed.unlink(missing_ok=True)
        write_text_atomic(str(plan.cache_dir / "command.txt"), " ".join(shlex.quote(c) for c in plan.command) + "\n")
    return lib


def check_owned(path: Path, *, directory: bool = False, fd: int | None = None) -> None:
    """NativeBuildError unless ``path`` (or the open ``fd``) is a regular file (a directory when
    ``directory``), not a symlink, owned by this user or root and not writable by group or others:
    a library loaded into the process runs with its rights, so nobody else may have written it
    (tf_autopar._files.check_owned)."""
    try:
        st = os.fstat(fd) if fd is not None else os.lstat(path)
        _files.check_owned(st, str(path), directory=directory)
    except _files.Untrusted as exc:
        raise NativeBuildError(exc.strerror) from None
    except OSError as exc:
        raise NativeBuildError(f"cannot check {path}: {exc.strerror or exc}") from None


def _trusted(lib: Path) -> bool:
    """Whether a cached library exists and may be loaded; an untrusted one is rebuilt (said once)."""
    if not os.path.lexists(lib):
        return False
    try:
        check_owned(lib)
    except NativeBuildError as exc:
        log.warning("rebuilding the native tracer: %s", exc)
        return False
    return True


def open_library(path: Path) -> int:
    """A descriptor of the library at ``path``, opened without following a symlink and checked
    (check_owned) on that descriptor, so the file checked is the file loaded."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise NativeBuildError(f"cannot open the native tracer {path}: {exc.strerror or exc}") from None
    try:
        check_owned(path, fd=fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tf_autopar.tracing.build", description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if a cached library exists")
    args = parser.parse_args(argv)
    try:
        path = build(force=args.force)
    except NativeBuildError as exc:
        print(f"tf_autopar native tracer: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
