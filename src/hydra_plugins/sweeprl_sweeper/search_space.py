"""Hydra override grammar -> Optuna distributions.

Accepted forms (the user-facing grammar of hydra-optuna-sweeper 1.3):

========================================  ===============================================
``interval(0.0, 0.2)``                    FloatDistribution(0.0, 0.2)
``tag(log, interval(1e-6, 2e-5))``        FloatDistribution(1e-6, 2e-5, log=True)
``int(interval(2, 8))``                   IntDistribution(2, 8)
``tag(log, int(interval(16, 512)))``      IntDistribution(16, 512, log=True)
``range(2, 10, 2)``                       IntDistribution(2, 10, step=2) (float range -> FloatDistribution with step)
``choice(4, 6, 8)`` or ``4,6,8``          CategoricalDistribution([4, 6, 8])
a plain value                             fixed override, passed to every trial
========================================  ===============================================
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Tuple

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.errors import HydraException
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution


class SearchSpaceError(HydraException):
    """A search-space entry cannot be turned into an Optuna distribution."""


@dataclass
class SearchSpace:
    distributions: Dict[str, BaseDistribution]
    fixed: Dict[str, str]  # key -> override value text

    def log_scale(self, key: str) -> bool:
        dist = self.distributions.get(key)
        return bool(getattr(dist, "log", False))


def _num(x: Any) -> float:
    return float(x)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def distribution_of(override: Override) -> BaseDistribution:
    value = override.value()
    key = override.get_key_element()
    if isinstance(value, ChoiceSweep):
        choices = [c for c in value.list]
        if not choices:
            raise SearchSpaceError(f"search space '{key}': choice() needs at least one value")
        if any(isinstance(c, (dict, list)) for c in choices):
            raise SearchSpaceError(f"search space '{key}': choice() values must be scalars, got {choices}")
        return CategoricalDistribution(choices)
    if isinstance(value, RangeSweep):
        if value.shuffle:
            raise SearchSpaceError(f"search space '{key}': shuffle(range(...)) is not supported")
        start, stop, step = value.start, value.stop, value.step
        if all(_is_int(v) for v in (start, stop, step)):
            high = stop - ((stop - start) % step or step)  # range() excludes stop
            if high < start:
                raise SearchSpaceError(f"search space '{key}': range({start}, {stop}, {step}) is empty")
            return IntDistribution(int(start), int(high), step=int(step))
        high = _num(stop) - _num(step)
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


def parse_search_space(params: Mapping[str, Any] | None, cli_overrides: List[str]) -> Tuple[SearchSpace, List[str]]:
    """Build the space from ``hydra.sweeper.params`` and the command line (the command line wins).

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

    distributions: Dict[str, BaseDistribution] = {}
    fixed: Dict[str, str] = {}
    passthrough: List[str] = []
    for ov in parsed_params:
        key = ov.get_key_element()
        if ov.is_sweep_override():
            distributions[key] = distribution_of(ov)
        else:
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


def format_value(value: Any) -> str:
    """An Optuna-sampled value as Hydra override text."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return value
    return str(value)


def format_number(value: float, digits: int = 3) -> str:
    """A float as override text with ``digits`` significant digits that Hydra still parses as a float."""
    text = f"{value:.{digits}g}"
    return text if any(c in text for c in ".eEn") else text + ".0"


def format_distribution(dist: BaseDistribution) -> str:
    """An Optuna distribution as Hydra override grammar (the inverse of :func:`distribution_of`)."""
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
