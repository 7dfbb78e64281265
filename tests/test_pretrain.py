"""model=tiny_ocaml: the pretraining corpus, its held-out problems, a deterministic build, build-model."""

from __future__ import annotations

import hashlib

import pytest

from conftest import compose_cfg

QUICK = ["model.pretrain.steps=4", "model.pretrain.batch_size=2", "model.pretrain.context=96"]
QUICK += ["model.pretrain.variants=1", "model.pretrain.synthetic=8"]  # both are tested in test_ocaml_variants


def test_corpus_is_the_installed_stdlib_and_the_solved_problems_minus_the_held_out_ones():
    from sweeprl.data.ocaml import shipped_problems
    from sweeprl.data.registry import in_validation
    from sweeprl.models.pretrain import solution_documents, stdlib_sources

    library = stdlib_sources()
    assert library.count("\n") > 15000 and "let rec iter f = function" in library  # list.ml, as shipped
    problems = shipped_problems()
    docs = solution_documents(0.25)
    shown = {p["id"] for p in problems if any(p["reference_solution"].rstrip("\n") in d for d in docs)}
    validation = {p["id"] for p in problems if in_validation(p["id"], 0.1)}  # data.validation_fraction's split
    assert validation and not shown & validation  # the problems GRPO validates on were never shown solved
    assert shown == {p["id"] for p in problems if not in_validation(p["id"], 0.25)}
    assert all(d.startswith("(* ") and d.endswith("\n(* END *)\n") for d in docs)  # the prompt format + marker
    assert len(solution_documents(0.0)) == len(problems)


def _weights(path):
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_build_is_deterministic_and_keyed_by_its_settings(tmp_path):
    from sweeprl.models.tiny import ensure_tiny_model

    cfg = compose_cfg(["model=tiny", "model.pretrain.corpus=ocaml", *QUICK])
    lines = []
    a = ensure_tiny_model(dict(cfg.model.tiny), tmp_path / "a", dict(cfg.model.pretrain), progress=lines.append)
    b = ensure_tiny_model(dict(cfg.model.tiny), tmp_path / "b", dict(cfg.model.pretrain))
    assert _weights(a) == _weights(b)  # same spec, settings and corpus: the same model, bit for bit
    assert lines[0].startswith("pretraining the tiny model on OCaml: 4 steps of 2 x 96 bytes")
    assert any("step 4/4" in line for line in lines) and lines[-1].startswith("built tiny model")
    random_init = ensure_tiny_model(dict(cfg.model.tiny), tmp_path / "a")
    assert random_init != a and _weights(random_init) != _weights(a)
    longer = dict(cfg.model.pretrain, steps=5)
    assert ensure_tiny_model(dict(cfg.model.tiny), tmp_path / "a", longer).name != a.name


def test_pretrain_settings_are_validated():
    from sweeprl.config.validate import ConfigValidationError, validate

    with pytest.raises(ConfigValidationError, match=r"model.pretrain.corpus='python' is invalid; allowed: one of none"):
        validate(compose_cfg(["model=tiny_ocaml", "model.pretrain.corpus=python"]))
    with pytest.raises(ConfigValidationError, match="model.pretrain.held_out_fraction"):
        validate(compose_cfg(["model=tiny_ocaml", "model.pretrain.held_out_fraction=1.5"]))


def test_difficulty_keeps_one_tier():
    from sweeprl.data.ocaml import ocaml_problems

    easy = ocaml_problems(compose_cfg(["experiment=ocaml_cpu"]).data)
    assert len(easy) == 23 and "sum_list" in {r["id"] for r in easy}
    with pytest.raises(ValueError, match=r"no problem has \['trivial'\]; allowed: easy, hard, medium"):
        ocaml_problems(compose_cfg(["experiment=ocaml_cpu", "data.kwargs.difficulty=trivial"]).data)


def test_build_model_command(tmp_path, capsys):
    from sweeprl.cli.build_model import main

    assert main(["tiny_ocaml", f"model.cache_dir={tmp_path}", *QUICK]) == 0
    out = capsys.readouterr().out
    built = out.strip().splitlines()[-1]
    assert built.startswith("model=tiny_ocaml: ") and str(tmp_path) in built
    with pytest.raises(SystemExit, match="only source: tiny models are built locally"):
        main(["qwen2.5-coder-1.5b"])
    with pytest.raises(SystemExit, match="only model.\\* overrides apply here, not algo.beta=0"):
        main(["tiny_ocaml", "algo.beta=0"])
