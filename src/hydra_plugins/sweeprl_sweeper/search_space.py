"""Hydra override grammar -> Optuna distributions, and back.

Accepted forms (the user-facing grammar of hydra-optuna-sweeper 1.3):

========================================  ===============================================
``interval(0.0, 0.2)``                    FloatDistribution(0.0, 0.2)
``tag(log, interval(1e-6, 2e-5))``        FloatDistribution(1e-6, 2e-5, log=True)
``int(interval(2, 8))``                   IntDistribution(2, 8)
``tag(log, int(interval(16, 512)))``      IntDistribution(16, 512, log=True)
``range(2, 10, 2)``                       IntDistribution(2, 8, step=2) (float range -> FloatDistribution with step)
``shuffle(range(0, 4))``                  CategoricalDistribution([0, 1, 2, 3])
``choice(4, 6, 8)`` or ``4,6,8``          CategoricalDistribution([4, 6, 8])
a plain value                             fixed override, passed to every trial
========================================  ===============================================

``range(a, b[, step])`` excludes ``b`` for every sampler, as the same override does in Hydra's basic sweeper (and
as hydra-optuna-sweeper 1.3 does for grid); hydra-optuna-sweeper 1.3 included ``b`` for the other samplers.

Also here: the deprecated 1.1-style ``search_space`` mapping (:func:`distributions_from_config`), the grid of a
finite space (:func:`grid_of`) and the ``custom_search_space`` function (:func:`resolve_custom_search_space`).
"""

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.errors import HydraException

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

# Hydra's plugin scan executes this module on every command (it is not underscored, and sweeprl imports it), so
# Optuna is imported inside the functions that need it, and the dataclass has no string annotations.

DEPRECATION_URL = "https://hydra.cc/docs/upgrades/1.1_to_1.2/changes_to_sweeper_config/"


class SearchSpaceError(HydraException):
    """A search-space entry cannot be turned into an Optuna distribution."""


@dataclass
class SearchSpace:
    distributions: Dict[str, Any]  # key -> optuna BaseDistribution
    fixed: Dict[str, str]  # key -> override value text

    def log_scale(self, key: str) -> bool:
        dist = self.distributions.get(key)
        return bool(getattr(dist, "log", False))


def _num(x: Any) -> float:
    return float(x)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _scalar_choices(key: str, values: List[Any]) -> "BaseDistribution":
    from optuna.distributions import CategoricalDistribution

    if not values:
        raise SearchSpaceError(f"search space '{key}': choice() needs at least one value")
    if any(isinstance(c, (dict, list)) for c in values):
        raise SearchSpaceError(f"search space '{key}': choice() values must be scalars, got {values}")
    return CategoricalDistribution(values)


def distribution_of(override: Override) -> "BaseDistribution":
    from optuna.distributions import FloatDistribution, IntDistribution

    value = override.value()
    key = override.get_key_element()
    if isinstance(value, ChoiceSweep):
        return _scalar_choices(key, list(value.list))
    if isinstance(value, RangeSweep):
        if value.shuffle:  # a categorical over the range's values (Hydra's iterator, which excludes stop)
            return _scalar_choices(key, sorted(override.sweep_iterator()))
        start, stop, step = value.start, value.stop, value.step
        if all(_is_int(v) for v in (start, stop, step)):
            high = stop - ((stop - start) % step or step)  # range() excludes stop
            if high < start:
                raise SearchSpaceError(f"search space '{key}': range({start}, {stop}, {step}) is empty")
            return IntDistribution(int(start), int(high), step=int(step))
        high = _num(stop) - _num(step)
        if high < _num(start):
            raise SearchSpaceError(f"search space '{key}': range({start}, {stop}, {step}) is empty")
        return FloatDistribution(_num(start), high, step=_num(step))
    if isinstance(value, IntervalSweep):
        log = "log" in value.tags
        unknown = set(value.tags) - {"log"}
        if unknown:
            raise SearchSpaceError(f"search space '{key}': unknown tag(s) {sorted(unknown)}; only 'log' is understood")
        start, end = value.start, value.end
        if start is None or end is None or not _num(start) < _num(end):
            raise SearchSpaceError(f"search space '{key}': interval({start}, {end}) needs low < high")
        if log and _num(start) <= 0:
            raise SearchSpaceError(f"search space '{key}': tag(log, interval({start}, {end})) needs low > 0")
        if _is_int(start) and _is_int(end):
            return IntDistribution(int(start), int(end), log=log)
        return FloatDistribution(_num(start), _num(end), log=log)
    raise SearchSpaceError(f"search space '{key}': unsupported sweep {override.input_line!r}")


def parse_search_space(
    params: Optional[Mapping[str, Any]],
    cli_overrides: List[str],
    base: Optional[Mapping[str, Any]] = None,
) -> Tuple[SearchSpace, List[str]]:
    """Build the space from ``base`` (the deprecated ``search_space``), ``hydra.sweeper.params`` and the command
    line, each later source winning over the earlier ones.

    Returns the space and the command-line overrides that are neither sweeps nor hydra settings, which every
    trial must receive unchanged.
    """
    parser = OverridesParser.create()
    lines = [f"{k}={v}" for k, v in (params or {}).items()]
    try:
        parsed_params = parser.parse_overrides(lines)
    except HydraException as exc:
        raise SearchSpaceError(f"malformed search space in hydra.sweeper.params: {exc}") from exc
    try:
        parsed_cli = parser.parse_overrides(list(cli_overrides))
    except HydraException as exc:
        raise SearchSpaceError(f"malformed command-line override: {exc}") from exc

    distributions: Dict[str, Any] = dict(base or {})
    fixed: Dict[str, str] = {}
    passthrough: List[str] = []
    for ov in parsed_params:
        key = ov.get_key_element()
        if ov.is_sweep_override():
            distributions[key] = distribution_of(ov)
        else:
            distributions.pop(key, None)
            fixed[key] = ov.get_value_element_as_str()
    for ov in parsed_cli:
        key = ov.get_key_element()
        if ov.is_sweep_override():
            if ov.is_hydra_override():
                raise SearchSpaceError(f"cannot sweep over hydra setting '{key}'")
            distributions[key] = distribution_of(ov)
            fixed.pop(key, None)
        else:
            distributions.pop(key, None)
            fixed.pop(key, None)
            passthrough.append(ov.input_line)
    return SearchSpace(distributions, fixed), passthrough


# ----------------------------------------------------------------------------------------------- deprecated form
def distributions_from_config(
    search_space: Optional[Mapping[str, Any]], params: Optional[Mapping[str, Any]]
) -> Dict[str, "BaseDistribution"]:
    """hydra-optuna-sweeper 1.1's ``search_space`` ({name: {type, low, high, step, log, choices}}), with 1.3's two
    warnings: a deprecation warning when it is used alone, a UserWarning (and ``search_space`` ignored) when
    ``params`` is set too."""
    if not search_space:
        return {}
    if params is not None:
        warnings.warn(  # noqa: B028 - the text and level of hydra-optuna-sweeper 1.3
            "Both hydra.sweeper.params and hydra.sweeper.search_space are configured."
            "\nHydra will use hydra.sweeper.params for defining search space."
            f"\n{DEPRECATION_URL}"
        )
        return {}
    from hydra._internal.deprecation_warning import deprecation_warning  # honours HYDRA_DEPRECATION_WARNINGS_AS_ERRORS

    deprecation_warning(
        message="`hydra.sweeper.search_space` is deprecated and will be removed in the next major release.\n"
        f"Please configure with `hydra.sweeper.params`.\n{DEPRECATION_URL}\n"
    )
    return {str(name): _distribution_from_entry(str(name), entry) for name, entry in search_space.items()}


def _distribution_from_entry(name: str, entry: Any) -> "BaseDistribution":
    from optuna.distributions import FloatDistribution, IntDistribution

    if not isinstance(entry, Mapping):
        raise SearchSpaceError(f"hydra.sweeper.search_space.{name} must be a mapping with a 'type', got {entry!r}")
    kind = str(entry.get("type", "")).split(".")[-1]  # "float" or DistributionType.float
    low, high, step, log = entry.get("low"), entry.get("high"), entry.get("step"), bool(entry.get("log", False))
    if kind == "categorical":
        return _scalar_choices(f"search_space.{name}", list(entry.get("choices") or []))
    if kind not in ("int", "float") or low is None or high is None:
        raise SearchSpaceError(
            f"hydra.sweeper.search_space.{name}={dict(entry)} is invalid; allowed: type int|float with low and high, "
            "or type categorical with choices"
        )
    if kind == "int":
        return IntDistribution(int(low), int(high), log=log, step=1 if log else int(step or 1))
    if log:
        return FloatDistribution(float(low), float(high), log=True)
    return FloatDistribution(float(low), float(high), step=float(step) if step is not None else None)


# ----------------------------------------------------------------------------------------------- grid
def grid_of(space: SearchSpace) -> Dict[str, List[Any]]:
    """The values of every distribution of a finite space (GridSampler's search space)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    grid: Dict[str, List[Any]] = {}
    for key, dist in space.distributions.items():
        if isinstance(dist, CategoricalDistribution):
            grid[key] = list(dist.choices)
        elif isinstance(dist, IntDistribution):
            grid[key] = list(range(dist.low, dist.high + 1, dist.step))
        elif isinstance(dist, FloatDistribution) and dist.step is not None:
            n = int(round((dist.high - dist.low) / dist.step))
            grid[key] = [dist.low + i * dist.step for i in range(n + 1)]
        else:
            raise SearchSpaceError(
                f"sampler=grid needs a finite space; '{key}' is a continuous interval (use choice() or range())"
            )
    return grid


def grid_size(grid: Mapping[str, List[Any]]) -> int:
    size = 1
    for values in grid.values():
        size *= len(values)
    return size


# ----------------------------------------------------------------------------------------------- custom fn
def resolve_custom_search_space(path: Optional[str]) -> Optional[Callable[..., None]]:
    """``custom_search_space``, resolved the way hydra-optuna-sweeper 1.3 does: through
    ``hydra.utils.instantiate({"_target_": path, "_partial_": True})``, so Hydra's target checks apply (``os.system``
    is refused as blocklisted). A leading dot (the upstream example's ``.module.fn``) is dropped: hydra-core >= 1.2
    refuses relative paths, and the module is found from the script's dir either way."""
    if not path:
        return None
    from hydra.utils import instantiate

    target = str(path).lstrip(".")
    try:
        return instantiate({"_target_": target, "_partial_": True})
    except Exception as exc:  # noqa: BLE001 - import errors, blocklisted targets: one clear message
        raise SearchSpaceError(f"hydra.sweeper.custom_search_space={path!r} cannot be imported: {exc}") from exc


# ----------------------------------------------------------------------------------------------- formatting
_PARSER: Optional[OverridesParser] = None


def _round_trips(text: str) -> bool:
    """Whether ``k=<text>`` parses back to exactly the string ``text``."""
    global _PARSER
    if _PARSER is None:
        _PARSER = OverridesParser.create()
    try:
        ov = _PARSER.parse_override(f"k={text}")
    except HydraException:
        return False
    return not ov.is_sweep_override() and isinstance(ov.value(), str) and ov.value() == text


def quote(value: str) -> str:
    """A string as a quoted Hydra override value."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def format_value(value: Any) -> str:
    """An Optuna-sampled value as Hydra override text: floats round-trip exactly, strings stay strings (quoted
    when the bare text would parse as something else, e.g. ``'1'``, ``'a,b'`` or ``'x(y)'``), None is null."""
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return value if value and _round_trips(value) else quote(value)
    return str(value)


def format_number(value: float, digits: int = 3) -> str:
    """A float as override text with ``digits`` significant digits that Hydra still parses as a float."""
    text = f"{value:.{digits}g}"
    return text if any(c in text for c in ".eEn") else text + ".0"


def format_distribution(dist: "BaseDistribution") -> str:
    """An Optuna distribution as Hydra override grammar (the inverse of :func:`distribution_of`)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(dist, CategoricalDistribution):
        return "choice(" + ", ".join(format_value(c) for c in dist.choices) + ")"
    if isinstance(dist, IntDistribution):
        if dist.step and dist.step > 1:
            return f"range({dist.low}, {dist.high + dist.step}, {dist.step})"
        body = f"int(interval({dist.low}, {dist.high}))"
        return f"tag(log, {body})" if dist.log else body
    if isinstance(dist, FloatDistribution):
        if dist.step is not None:
            lo, hi, step = (format_number(v) for v in (dist.low, dist.high + dist.step, dist.step))
            return f"range({lo}, {hi}, {step})"
        body = f"interval({format_number(dist.low)}, {format_number(dist.high)})"
        return f"tag(log, {body})" if dist.log else body
    raise SearchSpaceError(f"cannot write {type(dist).__name__} as a search-space override")
