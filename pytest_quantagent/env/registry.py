"""Finding and loading domains.

Domain content lives in ``<domains dir>/<name>/domain.py``, which defines::

    def make_domain(data_dir: Path, tasks_file: str | None, official: bool) -> Domain

The domains dir is ``$QUANTAGENT_DOMAINS_DIR`` if set, else ``pytest_quantagent/_domains``
(the wheel), else ``<repo>/domains`` (editable install). With ``tau2_data`` given, the
domain is built from τ²-bench's files in ``<tau2_data>/domains/<name>/`` (``official=True``).

Domains are loaded lazily and cached per process (the DB is parsed once).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from pathlib import Path
from types import ModuleType

from pytest_quantagent.env.domain import Domain
from pytest_quantagent.errors import DataFileError, UnknownNameError

_PKG = Path(__file__).resolve().parent.parent
_cache: dict[tuple[str, str | None, str | None, str], Domain] = {}
_modules: dict[Path, ModuleType] = {}
_packages: dict[Path, list[tuple[str, ModuleType]]] = {}
"""Per loaded domain, its parent package, its package and its ``domain`` module, to put back
in ``sys.modules`` when something removed them (see :func:`_load_module`)."""
_lock = threading.Lock()


def domains_dir() -> Path:
    """The directory holding the domain packages."""
    env = os.environ.get("QUANTAGENT_DOMAINS_DIR")
    if env:
        return Path(env)
    bundled = _PKG / "_domains"
    if bundled.is_dir():
        return bundled
    return _PKG.parent / "domains"


def list_domains() -> list[str]:
    """Names of the available domains (directories with a ``domain.py``)."""
    d = domains_dir()
    if not d.is_dir():
        return []
    return sorted(p.name for p in d.iterdir() if (p / "domain.py").is_file())


_PARENT = "pytest_quantagent_domains"


def _load_module(path: Path, name: str) -> ModuleType:
    """Import ``<domains dir>/<name>/domain.py`` as ``pytest_quantagent_domains.<name>.domain``
    so the domain's relative imports (``from .tools import ...``) work."""
    mod = _modules.get(path)
    if mod is not None:
        # pytester's in-process runs restore sys.modules afterwards, dropping the domain's
        # packages when they were first imported inside one while this cache keeps the module;
        # a lazy relative import in the domain (``from .user_sim import ...``) needs them back
        for pkg_name, pkg in _packages.get(path, ()):
            sys.modules.setdefault(pkg_name, pkg)
        return mod
    root = str(path.parent.parent)
    parent = sys.modules.get(_PARENT)
    if parent is None:
        parent = ModuleType(_PARENT)
        parent.__path__ = []
        sys.modules[_PARENT] = parent
    if root not in parent.__path__:
        parent.__path__.append(root)
    mod = importlib.import_module(f"{_PARENT}.{name}.domain")
    _modules[path] = mod
    _packages[path] = [(n, sys.modules[n]) for n in (_PARENT, f"{_PARENT}.{name}", mod.__name__)]
    return mod


def get_domain(
    name: str, tau2_data: Path | str | None = None, tasks_file: str | None = None
) -> Domain:
    """The domain ``name``, built from our bundled data or, with ``tau2_data``, from a
    τ²-bench checkout's data files. Unknown names raise an error listing the known ones."""
    known = list_domains()
    if name not in known:
        raise UnknownNameError("domain", name, known, hint=f"domains are looked up in {domains_dir()}")
    official = tau2_data is not None
    if official:
        from pytest_quantagent.env.tasksets import tau2_data_root

        data_dir = tau2_data_root(Path(tau2_data)) / "domains" / name  # type: ignore[arg-type]
        if not data_dir.is_dir():
            raise DataFileError(
                data_dir, "", f"no τ²-bench data for domain {name!r} (expected <tau2-data>/domains/{name}/)"
            )
    else:
        data_dir = domains_dir() / name
    key = (name, str(data_dir), tasks_file, "official" if official else "ours")
    with _lock:
        dom = _cache.get(key)
        if dom is None:
            mod = _load_module(domains_dir() / name / "domain.py", name)
            dom = mod.make_domain(data_dir, tasks_file, official)
            if not isinstance(dom, Domain):
                raise TypeError(f"{name}/domain.py: make_domain returned {type(dom).__name__}, expected Domain")
            _check_functions(dom, data_dir / (tasks_file or "tasks.json"))
            dom.code_dirs = (domains_dir() / name,)
            _cache[key] = dom
    return dom


def get_domain_for_split(
    name: str, tau2_data: Path | str | None = None, split: str | None = None
) -> Domain:
    """:func:`get_domain`, with τ²-bench data loading the task file that holds ``split``
    (see :func:`pytest_quantagent.env.tasksets.tasks_file_for_split`)."""
    tasks_file = None
    if tau2_data is not None and name in list_domains():
        from pytest_quantagent.env.tasksets import tau2_data_root

        data_dir = tau2_data_root(Path(tau2_data)) / "domains" / name
        if data_dir.is_dir():
            from pytest_quantagent.env.tasksets import tasks_file_for_split

            tasks_file = tasks_file_for_split(data_dir, split, name)
    return get_domain(name, tau2_data=tau2_data, tasks_file=tasks_file)


def _check_functions(dom: Domain, source: Path) -> None:
    """Gold actions, initialization actions and environment assertions of every task must
    name functions the domain's toolkits have (issue 28, finding 11)."""
    from pytest_quantagent.env.tasks import check_task_functions, public_functions

    check_task_functions(
        dom.tasks, source,
        agent_tools=dom.agent_tool_names, user_tools=dom.user_tool_names,
        agent_functions=public_functions(dom.agent_toolkit),
        user_functions=public_functions(dom.user_toolkit),
    )


def clear_cache() -> None:
    """Forget loaded domains (tests)."""
    with _lock:
        _cache.clear()
