"""A user's own reward functions, named in ``reward.funcs`` by import path instead of a registered name.

Two forms, as users of TRL and Hydra write them:

- ``name: my_pkg.rewards:format_reward`` (or ``my_pkg.rewards.format_reward``): a function with TRL's reward
  signature; ``kwargs`` are passed with every call, after TRL's own keywords;
- ``_target_: my_pkg.rewards.UnitTestReward``: a factory (class or function) that Hydra's ``instantiate`` calls
  once with ``kwargs``; what it returns is the reward function, and ``name`` names it in the logs.

TRL calls a reward as ``fn(prompts=…, completions=…, completion_ids=…, trainer_state=…, **dataset columns)``, so the
function must take ``completions`` and ``**kwargs``. :func:`problems` checks the import and the signature before
a sweep starts (nothing is instantiated then: a factory may load a model); :func:`custom_reward` builds it in the
trial, before the policy model loads.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Dict, List, Optional

#: the keywords TRL passes to every reward function (the dataset's other columns come on top)
TRL_KEYWORDS = ("prompts", "completions", "completion_ids", "trainer_state")


class RewardImportError(ValueError):
    """A reward named by import path that cannot be used: the message names the entry and what to change."""


def is_import_path(name: str) -> bool:
    return ":" in name or "." in name


def resolve(path: str, where: str) -> Any:
    """The object at ``pkg.module:attr`` or ``pkg.module.attr``."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise RewardImportError(f"{where}={path!r} is not an import path; allowed: pkg.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RewardImportError(
            f"{where}={path!r}: cannot import module {module_name!r} ({exc}); install the package or run from the "
            "directory that holds it (it must be importable in every trial process)"
        ) from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
            raise RewardImportError(
                f"{where}={path!r}: module {module_name!r} has no attribute {attr!r}; callables in it: "
                f"{', '.join(public[:12]) or 'none'}"
            )
        obj = getattr(obj, part)
    return obj


def signature_problem(fn: Any, where: str) -> Optional[str]:
    """Why TRL could not call ``fn`` as a reward, or None."""
    if not callable(fn):
        return f"{where} is a {type(fn).__name__}, not a callable"
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return None
    kinds = {p.kind for p in params}
    names = {p.name for p in params if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    shown = f"({', '.join(str(p) for p in params)})"
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        return (
            f"{where} has the signature {shown} without **kwargs; TRL calls a reward with "
            f"{', '.join(k + '=' for k in TRL_KEYWORDS)} and every dataset column as keywords: add **kwargs"
        )
    if "completions" not in names and any(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in params):
        return f"{where} has the signature {shown}; TRL passes completions= as a keyword"
    return None


def _label(path: str) -> str:
    return path.replace(":", ".").rsplit(".", 1)[-1]


def problems(funcs: List[Dict[str, Any]], registered: List[str]) -> List[str]:
    """What is wrong with the ``reward.funcs`` entries (plain dicts), without building any of them."""
    found = []
    for i, spec in enumerate(funcs):
        where = f"reward.funcs[{i}]"
        name, target = str(spec.get("name") or ""), spec.get("_target_")
        try:
            if target:
                factory = resolve(str(target), f"{where}._target_")
                if not callable(factory):
                    found.append(f"{where}._target_={target!r} is a {type(factory).__name__}, not a callable")
            elif name in registered:
                continue
            elif is_import_path(name):
                problem = signature_problem(resolve(name, f"{where}.name"), f"{where}.name={name!r}")
                if problem:
                    found.append(problem)
            else:
                found.append(
                    f"{where}.name={name!r} is not a registered reward; allowed: one of "
                    f"{', '.join(sorted(registered))}, or the import path of your own function (pkg.module:function)"
                )
        except RewardImportError as exc:
            found.append(str(exc))
    return found


def custom_reward(name: str, target: Optional[str], kwargs: Dict[str, Any]) -> Callable[..., List[float]]:
    """The reward function of a ``reward.funcs`` entry given by import path (see the module docstring)."""
    if target:
        from hydra.utils import instantiate

        resolve(target, "reward.funcs[]._target_")  # the clear import error first
        try:
            fn = instantiate({"_target_": target, **kwargs}, _convert_="all")
        except Exception as exc:  # noqa: BLE001 - the factory's own error, with the entry named
            raise RewardImportError(f"reward {name!r}: _target_={target!r} with kwargs {kwargs}: {exc}") from exc
        label, bound = name, {}
    else:
        fn, label, bound = resolve(name, "reward.funcs[].name"), _label(name), dict(kwargs)
    problem = signature_problem(fn, f"reward {name!r}")
    if problem:
        raise RewardImportError(problem)

    def reward(completions, **trl_keywords):
        return fn(completions=completions, **{**trl_keywords, **bound})

    reward.__name__ = label  # TRL logs rewards/<__name__>/mean
    reward.__doc__ = getattr(fn, "__doc__", None)
    return reward
