"""Hydra override grammar -> Optuna distributions (hydra-optuna-sweeper 1.3 compatible)."""

from __future__ import annotations

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from hydra_plugins.sweeprl_sweeper.search_space import SearchSpaceError, format_value, parse_search_space
from hydra_plugins.sweeprl_sweeper.search_space import grid_of as _grid_of


def dist(expr: str):
    space, _ = parse_search_space({"x.y": expr}, [])
    return space.distributions["x.y"]


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("interval(0.0, 0.2)", FloatDistribution(0.0, 0.2)),
        ("tag(log, interval(1e-6, 2e-5))", FloatDistribution(1e-6, 2e-5, log=True)),
        ("int(interval(2, 8))", IntDistribution(2, 8)),
        ("tag(log, int(interval(16, 512)))", IntDistribution(16, 512, log=True)),
        ("range(2, 10, 2)", IntDistribution(2, 8, step=2)),
        ("range(1, 4)", IntDistribution(1, 3)),
        ("choice(4, 6, 8)", CategoricalDistribution([4, 6, 8])),
        ("4,6,8", CategoricalDistribution([4, 6, 8])),
        ("choice(adamw_torch, sgd)", CategoricalDistribution(["adamw_torch", "sgd"])),
    ],
)
def test_grammar(expr, expected):
    assert dist(expr) == expected


def test_float_range_has_step():
    d = dist("range(0.5, 1.0, 0.25)")
    assert isinstance(d, FloatDistribution) and d.step == 0.25 and (d.low, d.high) == (0.5, 0.75)


@pytest.mark.parametrize(
    "expr, fragment",
    [
        ("interval(0.2, 0.1)", "needs low < high"),
        ("tag(log, interval(0.0, 1.0))", "needs low > 0"),
        ("tag(sqrt, interval(0.1, 1.0))", "unknown tag"),
        ("interval(0.1", "malformed search space"),
        ("range(5, 1)", "is empty"),
    ],
)
def test_bad_grammar_is_reported_with_the_key(expr, fragment):
    with pytest.raises(SearchSpaceError) as err:
        parse_search_space({"x.y": expr}, [])
    assert fragment in str(err.value)
    if "malformed" not in fragment:
        assert "x.y" in str(err.value)


def test_command_line_overrides_params_and_passes_fixed_values_through():
    space, passthrough = parse_search_space(
        {"algo.learning_rate": "interval(1e-4, 1e-2)", "algo.beta": "interval(0.0, 0.1)", "algo.seed": "3"},
        ["experiment=quickstart", "algo.beta=0.05", "generation.temperature=choice(0.7,1.0)"],
    )
    assert set(space.distributions) == {"algo.learning_rate", "generation.temperature"}
    assert space.fixed == {"algo.seed": "3"}
    assert passthrough == ["experiment=quickstart", "algo.beta=0.05"]


def test_grid_from_finite_space():
    space, _ = parse_search_space({"a": "choice(1, 2)", "b": "range(0, 3)"}, [])
    assert _grid_of(space) == {"a": [1, 2], "b": [0, 1, 2]}
    space, _ = parse_search_space({"a": "interval(0, 1.5)"}, [])
    with pytest.raises(SearchSpaceError, match="finite space"):
        _grid_of(space)


def test_format_value_round_trips_floats():
    assert float(format_value(0.00020867951521511344)) == 0.00020867951521511344
    assert format_value(6) == "6" and format_value("dapo") == "dapo"


def test_shuffle_range_is_a_categorical_of_the_ranges_values():
    assert dist("shuffle(range(0, 4))") == CategoricalDistribution([0, 1, 2, 3])


@pytest.mark.parametrize("value", ["dapo", "a,b", "1", "true", "null", "x(y)", "it's", "", "a b", 1, 0.5, True, None])
def test_format_value_is_override_text_that_parses_back_to_the_value(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(f"k={format_value(value)}")
    assert not parsed.is_sweep_override() and parsed.value() == value and type(parsed.value()) is type(value)


@pytest.mark.parametrize(
    "expr", ["interval(0.0, 0.2)", "tag(log, interval(1e-06, 2e-05))", "range(2, 10, 2)", "choice(a, 'b,c', 3)"]
)
def test_format_distribution_is_the_inverse_of_the_grammar(expr):
    from hydra_plugins.sweeprl_sweeper.search_space import format_distribution

    assert dist(format_distribution(dist(expr))) == dist(expr)


def test_deprecated_search_space_converts_and_warns_as_hydra_optuna_sweeper_1_3():
    from hydra_plugins.sweeprl_sweeper.search_space import distributions_from_config

    old = {
        "x": {"type": "float", "low": -5.5, "high": 5.5, "step": 0.5},
        "lr": {"type": "float", "low": 1e-5, "high": 1e-3, "log": True},
        "n": {"type": "int", "low": 1, "high": 9, "step": 2},
        "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
    }
    with pytest.warns(UserWarning, match="`hydra.sweeper.search_space` is deprecated"):
        dists = distributions_from_config(old, None)
    assert dists == {
        "x": FloatDistribution(-5.5, 5.5, step=0.5),  # the deprecated form includes high
        "lr": FloatDistribution(1e-5, 1e-3, log=True),
        "n": IntDistribution(1, 9, step=2),
        "opt": CategoricalDistribution(["adam", "sgd"]),
    }
    with pytest.warns(UserWarning, match="Both hydra.sweeper.params and hydra.sweeper.search_space are configured"):
        assert distributions_from_config(old, {"y": "choice(0, 1)"}) == {}  # params wins
