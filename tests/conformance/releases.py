"""SGLang's released wheels, fetched once and imported in isolation for the conformance tests.

The model is checked against the code SGLang shipped, not against a reading of it: each release's
wheel is fetched with `pip download --no-deps` into `.cache/sglang/` inside the clone, its
`sglang/srt/mem_cache` sources are unpacked beside it, and the HiCache modules are imported
from there. Only those modules run for real. Everything else they import (torch, the scheduler,
the metrics, other `sglang` packages) is a permissive stub: HiCache's decision logic is plain
Python that never touches a tensor on the paths the tests drive. No SGLang code is copied into
the repository.

Releases share module names, so each import runs with the release's own `sglang` modules in
`sys.modules` (see `imported`), and a test that calls into a release does so inside
`active(release)`, which puts that release's modules back for code that imports lazily.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import types
import zipfile
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

RELEASES = ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
"""Every release the model has a profile for, oldest first."""

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("HICACHE_SGLANG_CACHE", ROOT / ".cache" / "sglang"))
"""Where wheels and their unpacked sources live (ignored by git, kept between runs)."""

UNPACKED = ("sglang/srt/mem_cache/", "sglang/srt/managers/")
REAL = ("sglang.srt.mem_cache",)
"""The packages imported from the wheel; every other `sglang` module is a stub."""
STUBBED = ("torch", "triton", "msgspec")
"""Third-party modules the HiCache modules import at top level but do not use on these paths
(stubbed even where installed); any other third-party module this machine lacks is stubbed
too."""


def source_dir(release: str) -> Path:
    """The unpacked sources of a release, fetching and unpacking the wheel on first use.

    Unpacked into a private folder and renamed into place, so that processes collecting at
    once (xdist's workers on a fresh clone) never read a half-written tree: the first rename
    wins and the others keep its sources. The stamp names the wheel it was unpacked from (its
    file name and SHA-256) and how many files it holds: a tree from another wheel, or one that
    lost files, is unpacked again rather than read."""
    target = CACHE / release
    stamp = target / ".unpacked"
    cached = _cached_wheel(release)
    if _stamp_holds(stamp, cached):
        return target
    wheel = cached or _wheel(release)
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=CACHE, prefix=f".unpacking-{release}-"))
    work.chmod(0o755)
    try:
        count = _unpack(wheel, work)
        (work / ".unpacked").write_text(_stamp_text(wheel, count))
        if target.exists() and not _stamp_holds(stamp, wheel):
            shutil.rmtree(target, ignore_errors=True)  # stale, damaged or half-unpacked
        with contextlib.suppress(OSError):
            work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not _stamp_holds(stamp, wheel):
        raise RuntimeError(f"could not unpack the sglang {release} wheel into {target}")
    return target


def _unpack(wheel: Path, work: Path) -> int:
    """Extract the sources the tests import; a wheel that is not a readable zip archive is
    named, with what to do about it."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n.endswith(".py") and n.startswith(UNPACKED)]
            for name in names:
                archive.extract(name, work)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise RuntimeError(
            f"{wheel} is not a readable wheel ({exc}); delete it and run again to fetch it anew"
        ) from None
    return len(names)


def _stamp_text(wheel: Path, files: int) -> str:
    digest = hashlib.sha256()
    with wheel.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"{wheel.name} sha256:{digest.hexdigest()} files:{files}\n"


def _stamp_holds(stamp: Path, wheel: Path | None) -> bool:
    """The tree at the stamp's folder is whole and, where the wheel is at hand, unpacked from
    that very wheel."""
    try:
        text = stamp.read_text()
    except OSError:
        return False
    files = text.rpartition(" files:")[2].strip()
    found = sum(1 for _ in stamp.parent.rglob("*.py"))
    if not files.isdigit() or int(files) != found:
        return False
    if wheel is None:
        return True
    try:
        return text == _stamp_text(wheel, found)
    except OSError:
        return False


def _cached_wheel(release: str) -> Path | None:
    found = sorted((CACHE / "wheels" / release).glob("sglang-*.whl"))
    return found[0] if found else None


def shipping(name: str, since: str) -> list[str]:
    """The releases whose unpacked sources hold module `name` (`buffer_mode`), asserted to be
    every release from `since` on: a damaged tree must fail the suite, not drop its release
    from the tests."""
    found = [r for r in RELEASES if module(r, name) is not None]
    expected = [r for r in RELEASES if _order(r) >= _order(since)]
    if found != expected:
        missing = [r for r in expected if r not in found]
        raise RuntimeError(
            f"sglang.srt.mem_cache.{name} is missing from the unpacked sources of "
            f"{', '.join(missing) or 'none'} (found in {', '.join(found) or 'none'}; every "
            f"release from {since} ships it): delete "
            f"{' and '.join(str(CACHE / r) for r in missing) or 'the stray trees'} to unpack "
            "them again"
        )
    return found


def _order(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def _wheel(release: str) -> Path:
    """The release's wheel in the cache, downloaded into a private folder and moved into place
    (a concurrent download replaces it with the same file, never a partial one)."""
    folder = CACHE / "wheels" / release
    cached = _cached_wheel(release)
    if cached is not None:
        return cached
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".downloading-{release}-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp]
        done = subprocess.run([*command, f"sglang=={release}"], capture_output=True, text=True)
        for wheel in Path(tmp).glob("sglang-*.whl"):
            os.replace(wheel, folder / wheel.name)
    found = sorted(folder.glob("sglang-*.whl"))
    if done.returncode != 0 or not found:
        raise RuntimeError(f"could not fetch the sglang {release} wheel:\n{done.stderr[-2000:]}")
    return found[0]


# ---------------------------------------------------------------------- stubs


def _stub_init_subclass(cls: type, **kwargs: Any) -> None:
    """Stub bases accept class keywords (`msgspec.Struct, frozen=True`)."""


def _stub_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    """A stub instance used as a decorator returns what it decorates."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return self


class _StubType(type):
    """A stand-in class: any attribute is another stand-in, calling it with one callable returns
    that callable (a decorator), and it can be subclassed, subscripted and or-ed (annotations)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return stub(name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return super().__call__()

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __bool__(cls) -> bool:
        return False


def stub(name: str) -> Any:
    return _StubType(
        name,
        (),
        {
            "__init__": lambda self, *args, **kwargs: None,
            "__getattr__": lambda self, attr: stub(attr),
            "__init_subclass__": classmethod(_stub_init_subclass),
            "__call__": _stub_call,
        },
    )


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = stub(name)
        setattr(self, name, value)
        return value


def _under(name: str, prefixes: Sequence[str]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


class _ReleaseFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `sglang.srt.mem_cache.*` in one release's sources and stubs the rest."""

    def __init__(self, root: Path, real: Sequence[str]) -> None:
        self.root = root
        self.real = tuple(real)
        self._missing: set[str] = set()

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if _under(name, STUBBED) or self._absent(name):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if not _under(name, ("sglang",)):
            return None
        parts = Path(*name.split("."))
        if not _under(name, self.real):
            spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
            spec.submodule_search_locations = [str(self.root / parts)]
            return spec
        package = self.root / parts
        if package.is_dir():
            init = package / "__init__.py"
            if init.exists():
                return importlib.util.spec_from_file_location(
                    name, init, submodule_search_locations=[str(package)]
                )
            spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
            spec.submodule_search_locations = [str(package)]
            return spec
        module = self.root / parts.with_suffix(".py")
        if module.exists():
            return importlib.util.spec_from_file_location(name, module)
        return None

    def _absent(self, name: str) -> bool:
        """A third-party package this machine lacks (a backend's client library): stubbed."""
        top = name.partition(".")[0]
        if top == "sglang" or top in sys.builtin_module_names:
            return False
        if top in self._missing:
            return True
        if top in sys.modules or importlib.machinery.PathFinder.find_spec(top) is not None:
            return False
        self._missing.add(top)
        return True

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = list(spec.submodule_search_locations or [])
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Stub and namespace modules have no code to run."""


def _take_modules() -> dict[str, types.ModuleType]:
    """Remove and return every sglang module and every stub from `sys.modules`."""
    return {
        name: sys.modules.pop(name)
        for name, value in list(sys.modules.items())
        if _under(name, ("sglang",)) or isinstance(value, _StubModule)
    }


@cache
def _loaded(release: str, real: tuple[str, ...]) -> dict[str, types.ModuleType]:
    """Every module of one release's import, by name, imported with nothing else of sglang in
    `sys.modules` (the caller's modules are put back afterwards)."""
    root = source_dir(release)
    saved = _take_modules()
    finder = _ReleaseFinder(root, real)
    sys.meta_path.insert(0, finder)
    try:
        for name in _MODULES:
            with contextlib.suppress(ModuleNotFoundError):
                importlib.import_module(name)
        return _take_modules()
    finally:
        sys.meta_path.remove(finder)
        sys.modules.update(saved)


_MODULES = (
    "sglang.srt.mem_cache.hicache_storage",
    "sglang.srt.mem_cache.buffer_mode.storage_existence_cache",
    "sglang.srt.mem_cache.storage_prefetch",
    "sglang.srt.mem_cache.unified_radix_cache",
    "sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller",
    "sglang.srt.mem_cache.storage.mooncake_store.mooncake_store",
    "sglang.srt.mem_cache.storage.hf3fs.storage_hf3fs",
    "sglang.srt.mem_cache.storage.nixl.hicache_nixl",
    "sglang.srt.mem_cache.storage.backend_factory",
    "sglang.srt.mem_cache.storage.umbp.umbp_store",
    "sglang.srt.mem_cache.storage.npu_memcache.npu_memcache_store",
    "sglang.srt.mem_cache.storage.seaweedfs.seaweedfs_store",
    "sglang.srt.mem_cache.storage.sim_storage",
    "sglang.srt.mem_cache.storage.shm.hicache_shm",
    "sglang.srt.mem_cache.storage.tensorcast_store.tensorcast_store",
    "sglang.srt.mem_cache.storage.aibrix_kvcache.aibrix_kvcache_storage",
    "sglang.srt.mem_cache.storage.eic.eic_storage",
    "sglang.srt.mem_cache.storage.simm.hicache_simm",
)
"""The modules a release's import brings in, where that release has them."""


@cache
def real_module(release: str, name: str, from_wheel: tuple[str, ...] = ()) -> types.ModuleType:
    """A release's module outside `mem_cache` (`sglang.srt.managers.scheduler`), imported for
    real with the harness's finder: its own imports stubbed, `mem_cache` real. The modules named
    in `from_wheel` (`sglang.srt.environ`, whose settings other modules read at import) are run
    for real straight from the wheel; they must import nothing of `sglang`."""
    root = source_dir(release)
    saved = _take_modules()
    sys.modules.update(_loaded(release, REAL))
    sys.modules.pop(name, None)  # a stub while `mem_cache` was imported
    for extra in from_wheel:
        sys.modules[extra] = _wheel_module(release, extra)
    finder = _ReleaseFinder(root, (*REAL, name))
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module(name)
    finally:
        sys.meta_path.remove(finder)
        _take_modules()
        sys.modules.update(saved)


def wheel_source(release: str, path: str) -> str | None:
    """The text of one file of a release's wheel (`sglang/srt/server_args.py`), or None where
    the wheel has no such file: for the files the tests read but never import."""
    wheel = _cached_wheel(release) or _wheel(release)
    with zipfile.ZipFile(wheel) as archive:
        if path not in archive.namelist():
            return None
        return archive.read(path).decode()


@cache
def stubbed_wheel_module(release: str, name: str) -> types.ModuleType:
    """A release's module outside the unpacked sources (`sglang.benchmark.serving`), read from
    its wheel and run with every `sglang` module it imports stubbed, and every third-party one
    this machine lacks or `STUBBED` names: for code whose functions under test use only numpy
    and the standard library."""
    path = name.replace(".", "/") + ".py"
    source = wheel_source(release, path)
    if source is None:
        raise RuntimeError(f"the sglang {release} wheel has no {path}")
    saved = _take_modules()
    finder = _ReleaseFinder(source_dir(release), ())
    sys.meta_path.insert(0, finder)
    module = types.ModuleType(name)
    module.__file__ = f"sglang-{release}/{path}"
    sys.modules[name] = module  # its dataclasses look their module up while they are made
    try:
        exec(compile(source, module.__file__, "exec"), module.__dict__)
        return module
    finally:
        sys.meta_path.remove(finder)
        _take_modules()
        sys.modules.update(saved)


def _wheel_module(release: str, name: str) -> types.ModuleType:
    """One self-contained module of a release, read from its wheel and run."""
    path = name.replace(".", "/") + ".py"
    source = wheel_source(release, path)
    if source is None:
        raise RuntimeError(f"the sglang {release} wheel has no {path}")
    module = types.ModuleType(name)
    module.__file__ = f"sglang-{release}/{path}"
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def module(release: str, name: str) -> types.ModuleType | None:
    """One module of a release (`sglang.srt.mem_cache.` may be left off), or None where that
    release has no such module."""
    full = name if name.startswith("sglang.") else f"sglang.srt.mem_cache.{name}"
    return _loaded(release, REAL).get(full)


CONTROLLER = "sglang.srt.managers.cache_controller"


def controller(release: str) -> types.ModuleType:
    """The release's `managers/cache_controller.py` run for real (its prefetch thread), in an
    import of its own: elsewhere the controller is a stub."""
    return _loaded(release, (*REAL, CONTROLLER))[CONTROLLER]


@contextlib.contextmanager
def active(release: str) -> Iterator[None]:
    """Run with this release's modules in `sys.modules`, for code that imports lazily."""
    saved = _take_modules()
    sys.modules.update(_loaded(release, REAL))
    try:
        yield
    finally:
        _take_modules()
        sys.modules.update(saved)
