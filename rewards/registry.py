"""Reward registry and resolution of reward specs to callables.

A spec is one of:

* a registered name, e.g. ``"accuracy"``;
* ``"package.module:function"`` (imported with importlib);
* ``"path/to/file.py:function"`` (loaded from the file).

Any ``.py`` file in the ``rewards/`` package directory whose name does not start with
``_`` and that registers a reward with :func:`register_reward` is found by name: the
directory is scanned lazily when a name is not registered yet. A file that fails to
import does not break anything else; its error is reported in the "unknown reward"
message and by ``python -m rewards list``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar, overload

from .scoring import RewardError

RewardFunc = Callable[..., Any]
F = TypeVar("F", bound=Callable[..., Any])

REWARD_REGISTRY: dict[str, RewardFunc] = {}

PACKAGE_NAME = __name__.rpartition(".")[0]
PACKAGE_DIR = Path(__file__).resolve().parent
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*", re.ASCII)


class RewardResolutionError(RewardError):
    """A reward spec could not be turned into a callable."""


def _qualified(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"


def _first_doc_line(fn: Any) -> str:
    doc = getattr(fn, "__doc__", None) or ""
    lines = [line.strip() for line in doc.strip().splitlines()]
    return lines[0] if lines else ""


@overload
def register_reward(name: str) -> Callable[[F], F]: ...
@overload
def register_reward(name: F) -> F: ...
def register_reward(name: Any) -> Any:
    """Decorator: ``@register_reward("name")`` (or bare ``@register_reward``, using ``__name__``).

    Returns the function unchanged, so it stays a plain TRL-compatible reward.
    Registering a different function under a taken name is an error; re-registering the
    same function (same module and qualified name, e.g. on re-import) replaces it.
    """
    if callable(name) and not isinstance(name, str):
        return register_reward(name.__name__)(name)
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"invalid reward name {name!r}: use letters, digits, '_', '-', '.' (no ':' or '/')")

    def decorator(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"@register_reward({name!r}) must decorate a callable, got {type(fn).__name__}")
        old = REWARD_REGISTRY.get(name)
        if old is not None and old is not fn and _qualified(old) != _qualified(fn):
            raise ValueError(f"reward name {name!r} is already registered by {_qualified(old)}")
        REWARD_REGISTRY[name] = fn
        return fn

    return decorator


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _load_file_module(path: Path) -> ModuleType:
    """Import a ``.py`` file by path; reuse the module if that file is already imported."""
    path = path.resolve()
    if path.parent == PACKAGE_DIR and path.stem.isidentifier():
        # A file of this package: import it under its real name so its rewards register once.
        return importlib.import_module(f"{PACKAGE_NAME}.{path.stem}")
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == path:
            return module
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    mod_name = f"_reward_file_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses, pickling etc. look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(mod_name, None)
        raise
    return module


def discover_rewards(search_dirs: Iterable[str | Path] | None = None) -> dict[str, str]:
    """Import every reward module in ``search_dirs`` (default: the ``rewards/`` package directory).

    Files whose name starts with ``_`` (and ``__main__.py``) are skipped. Returns
    ``{file path: one-line error}`` for files that failed to import; never raises for them.
    """
    dirs = [PACKAGE_DIR] if search_dirs is None else [Path(d).resolve() for d in search_dirs]
    importlib.invalidate_caches()  # see files created after the import system cached the listing
    errors: dict[str, str] = {}
    for directory in dirs:
        for path in sorted(directory.glob("*.py")):
            if path.stem.startswith("_"):
                continue
            try:
                _load_file_module(path)
            except (Exception, SystemExit) as exc:
                errors[str(path)] = _one_line(exc)
    return errors


def list_rewards(search_dirs: Iterable[str | Path] | None = None, *, discover: bool = True) -> dict[str, str]:
    """Registered rewards as ``{name: first docstring line}``, sorted by name (scans first)."""
    if discover:
        discover_rewards(search_dirs)
    return {name: _first_doc_line(fn) for name, fn in sorted(REWARD_REGISTRY.items())}


def _is_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def reward_file(spec: str | RewardFunc) -> Path | None:
    """The file a ``path/to/file.py:function`` spec reads, or None for any other spec."""
    if not isinstance(spec, str):
        return None
    target, _, attr = spec.strip().rpartition(":")
    return Path(target) if target and attr and _is_path(target) else None


def _resolve_target(spec: str) -> RewardFunc:
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise RewardResolutionError(
            f"bad reward spec {spec!r}: expected 'package.module:function' or 'file.py:function'"
        )
    if _is_path(target):
        path = Path(target)
        if not path.is_file():
            raise RewardResolutionError(f"reward file {target!r} not found (spec {spec!r})")
        try:
            module = _load_file_module(path)
        except (Exception, SystemExit) as exc:
            raise RewardResolutionError(f"cannot load reward file {target!r}: {_one_line(exc)}") from exc
        where = f"file {target!r}"
    else:
        try:
            module = importlib.import_module(target)
        except (Exception, SystemExit) as exc:
            raise RewardResolutionError(
                f"cannot import module {target!r} for reward {spec!r}: {_one_line(exc)}"
            ) from exc
        where = f"module {target!r}"
    obj: Any = module
    for part in attr.split("."):  # allows "module:Class.method" / "module:factory_result"
        if not hasattr(obj, part):
            public = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
            raise RewardResolutionError(
                f"{where} has no function {attr!r} (callables there: {', '.join(public) or 'none'})"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise RewardResolutionError(f"{attr!r} in {where} is a {type(obj).__name__}, not a callable")
    return obj


def resolve_reward(spec: str | RewardFunc, *, search_dirs: Iterable[str | Path] | None = None) -> RewardFunc:
    """Turn a spec (registered name, ``pkg.mod:fn`` or ``file.py:fn``) into the reward callable.

    A callable is returned as is. ``search_dirs`` overrides the directories scanned for
    rewards registered by name (default: the ``rewards/`` package directory).
    """
    if callable(spec) and not isinstance(spec, str):
        return spec
    if not isinstance(spec, str):
        raise RewardResolutionError(f"reward spec must be a string or callable, got {type(spec).__name__}")
    spec = spec.strip()
    if spec in REWARD_REGISTRY:
        return REWARD_REGISTRY[spec]
    if ":" in spec:
        return _resolve_target(spec)
    if spec.endswith(".py"):
        raise RewardResolutionError(
            f"reward spec {spec!r} names a file but no function: use '{spec}:function'"
        )
    errors = discover_rewards(search_dirs)
    if spec in REWARD_REGISTRY:
        return REWARD_REGISTRY[spec]
    msg = (
        f"unknown reward {spec!r}; registered: {', '.join(sorted(REWARD_REGISTRY)) or 'none'} "
        "(or use 'package.module:function' / 'path/to/file.py:function')"
    )
    if errors:
        msg += "; files that failed to import: " + "; ".join(f"{p}: {e}" for p, e in errors.items())
    raise RewardResolutionError(msg)


def _display_name(spec: str | RewardFunc, fn: RewardFunc) -> str:
    if isinstance(spec, str) and spec.strip() in REWARD_REGISTRY:
        return spec.strip()
    return getattr(fn, "__name__", None) or type(fn).__name__


def resolve_rewards(
    specs: Sequence[str | RewardFunc],
    weights: Sequence[float] | None = None,
    *,
    search_dirs: Iterable[str | Path] | None = None,
) -> tuple[list[RewardFunc], list[str], list[float]]:
    """Resolve several specs: ``(functions, unique display names, weights)``.

    Display names are the registered name, else the function's ``__name__``; repeats get
    ``_2``, ``_3``... so metric keys stay distinct. ``weights=None`` means all 1.0.
    """
    if isinstance(specs, str):
        specs = [specs]
    if not specs:
        raise RewardResolutionError("no reward functions given")
    dirs = list(search_dirs) if search_dirs is not None else None
    funcs = [resolve_reward(s, search_dirs=dirs) for s in specs]
    if weights is None:
        weight_list = [1.0] * len(funcs)
    else:
        if len(weights) != len(funcs):
            raise RewardResolutionError(
                f"got {len(weights)} reward weights for {len(funcs)} rewards {list(specs)}"
            )
        weight_list = [float(w) for w in weights]
        bad = [w for w in weight_list if w != w or w in (float("inf"), float("-inf"))]
        if bad:
            raise RewardResolutionError(f"reward weights must be finite, got {list(weights)}")
    names: list[str] = []
    for spec, fn in zip(specs, funcs, strict=True):
        base = name = _display_name(spec, fn)
        k = 2
        while name in names:
            name, k = f"{base}_{k}", k + 1
        names.append(name)
    return funcs, names, weight_list
