"""Renamed copies of a solved OCaml problem, for pretraining ``model=tiny_ocaml`` (:mod:`sweeprl.ocaml.pretrain`).

Shown each reference solution under its own names only, a 2M-parameter model memorises the strings: on the problems
it was pretrained on 91 % of its completions type-check, on held-out problems 0 % (as measured by
``bench/tiny_ocaml_quality.py`` on such a build). Shown the same solution under many names — ``sum_list`` as
``total_of_items``, the same renaming applied to the identifiers quoted in the prompt — it has to take the names
from the prompt and keep the structure, which is what a problem it has never seen asks of it.

How a variant is made:

- the solution is split into tokens by a small OCaml lexer (comments, strings, character literals and type
  variables are left whole);
- the names defined at the top level (``let`` / ``let rec`` / ``and`` / ``type`` at column 0: the functions
  and types the prompt asks for, and helpers) get a new two- or three-word name (a type with parameters,
  ``type 'a tree``, keeps its name: the pretrained model's corpus was made so); locals keep theirs, since a
  2M-parameter model learns a structure far sooner when only the names the prompt gives vary
  (:func:`renaming` renames locals too on request, to short names);
- never renamed: keywords, builtin types, the standard library's values (read from the installed
  ``stdlib.mli``) and names that appear after a ``.``, ``~`` or ``?`` anywhere (record fields, module members,
  labels); the map is one-to-one and never produces a kept name;
- the prompt's backquoted spans get the same renaming, so prompt and solution agree;
- each variant is type-checked with ``ocamlc -i`` and dropped if it does not (a renaming the lexer got wrong
  is not shown to the model).

Deterministic for a given seed, problem and OCaml installation.
"""

from __future__ import annotations

import functools
import random
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Sequence, Tuple

KEYWORDS = frozenset(
    """and as assert begin class constraint do done downto else end exception external false for fun function
    functor if in include inherit initializer lazy let match method module mutable new nonrec object of open or
    private rec sig struct then to true try type val virtual when while with mod land lor lxor lsl lsr asr""".split()
)
BUILTIN_TYPES = frozenset(
    "int float bool char string bytes unit list array option ref exn format result seq lazy_t int32 int64 "
    "nativeint".split()
)
TOP_WORDS = (
    "count sum total max min find filter map apply merge split take drop last first nth index length reverse "
    "rotate zip flatten compress encode decode parse check is has all any range sort insert remove replace "
    "update fold scan pair swap average product power digits even odd positive negative items values keys "
    "word text chars tree node leaf depth size area distance point shape value price score grade entry record "
    "group table queue stack window prefix suffix runs pairs step walk collect select keep squash"
).split()
LOCAL_NAMES = (
    "acc total n k m xs ys rest tl hd h t lst l s str i j idx c ch res result cnt cur prev best seen v item elt "
    "e y z p q a b f g w r u d lo hi left right front back go aux loop step tmp buf num sz len0 out inp"
).split()
_IDENT = re.compile(r"[a-z_][A-Za-z0-9_']*")
_TOP_BINDING = re.compile(r"^(?:let(?:\s+rec)?|and|type)\s+([a-z_][A-Za-z0-9_']*)", re.M)  # not type 'a t
_BACKQUOTED = re.compile(r"`([^`]*)`")


def tokens(code: str) -> Iterator[Tuple[str, str]]:
    """(kind, text) pieces of OCaml source whose concatenation is ``code``; kind is ``ident`` for a lowercase
    identifier and ``other`` for everything else (comments, strings, chars and type variables stay whole)."""
    i, n = 0, len(code)
    while i < n:
        ch = code[i]
        if code.startswith("(*", i):  # nested comments
            depth, j = 1, i + 2
            while j < n and depth:
                if code.startswith("(*", j):
                    depth, j = depth + 1, j + 2
                elif code.startswith("*)", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            yield "other", code[i:j]
            i = j
        elif ch == '"':
            j = i + 1
            while j < n and code[j] != '"':
                j += 2 if code[j] == "\\" else 1
            yield "other", code[i : j + 1]
            i = j + 1
        elif ch == "'":
            if i + 2 < n and code[i + 1] != "\\" and code[i + 2] == "'":  # 'a'
                j = i + 3
            elif i + 1 < n and code[i + 1] == "\\":  # '\n', '\065'
                j = code.find("'", i + 3) + 1 or n
            else:  # a type variable 'a (or a stray quote)
                m = _IDENT.match(code, i + 1)
                j = m.end() if m else i + 1
            yield "other", code[i:j]
            i = j
        elif ch.isalpha() or ch == "_":
            m = re.compile(r"[A-Za-z_][A-Za-z0-9_']*").match(code, i)
            word = m.group(0)  # type: ignore[union-attr]  # matches: code[i] is a letter or _
            yield ("ident" if _IDENT.fullmatch(word) else "other"), word
            i = m.end()  # type: ignore[union-attr]
        elif ch.isdigit():
            m = re.compile(r"[0-9][0-9A-Za-z_.]*").match(code, i)
            yield "other", m.group(0)  # type: ignore[union-attr]  # matches: code[i] is a digit
            i = m.end()  # type: ignore[union-attr]
        else:
            yield "other", ch
            i += 1


@functools.lru_cache(maxsize=1)
def stdlib_values() -> frozenset:
    """Names of the values the installed standard library opens by default (``val``/``external`` in
    ``stdlib.mli``), which a variant must not rename."""
    from sweeprl.ocaml.toolchain import ocaml_stdlib_dir

    mli = ocaml_stdlib_dir() / "stdlib.mli"
    text = mli.read_text(encoding="utf-8", errors="replace") if mli.exists() else ""
    names = re.findall(r"^\s*(?:val|external)\s+\(?\s*([a-z_][A-Za-z0-9_']*)", text, re.M)
    return frozenset(names)


def kept_names(code: str, prompt: str = "") -> frozenset:
    """Identifiers a renaming leaves alone in ``code``: keywords, builtin types, standard-library values and
    any name written after ``.``, ``~`` or ``?`` (fields, module members, labels)."""
    kept = set(KEYWORDS) | BUILTIN_TYPES | stdlib_values()
    for text in (code, *(_BACKQUOTED.findall(prompt))):
        pieces = [("other", "")] + list(tokens(text))
        for (_, two_before), (_, before), (kind, word) in zip(pieces, pieces[1:], pieces[2:]):
            if kind == "ident" and (before in (".", "~", "?") or (before == "(" and two_before in ("~", "?"))):
                kept.add(word)  # r.field, Module.member, ~label, ?label, ~(label : t)
    return frozenset(kept)


def renaming(code: str, prompt: str, rng: random.Random, rename_locals: bool = False) -> Dict[str, str]:
    """A one-to-one map from the renameable top-level names of ``code`` (and its locals with
    ``rename_locals``) to fresh names."""
    kept = kept_names(code, prompt)
    names = []
    for kind, word in tokens(code):
        if kind == "ident" and word not in kept and not word.startswith("_") and word not in names:
            names.append(word)
    top = set(_TOP_BINDING.findall(code))
    taken, out = set(kept) | set(names), {}  # type: ignore[var-annotated]  # (the recipe hashes this code)
    for name in names:
        if name not in top and not rename_locals:
            continue
        for _ in range(100):
            if name in top:
                new = "_".join(rng.sample(TOP_WORDS, rng.choice((2, 2, 3))))
            else:
                new = rng.choice(LOCAL_NAMES) + rng.choice(("", "", "", "1", "2", "'"))
            if new not in taken:
                break
        else:
            new = f"{name}_{len(out)}"
        out[name] = new
        taken.add(new)
    return out


def apply_renaming(code: str, names: Mapping[str, str]) -> str:
    return "".join(names.get(word, word) if kind == "ident" else word for kind, word in tokens(code))


def rename_problem(prompt: str, solution: str, rng: random.Random) -> Tuple[str, str]:
    """(prompt, solution) with one fresh renaming applied to the solution and the prompt's backquoted spans."""
    names = renaming(solution, prompt, rng)
    new_prompt = _BACKQUOTED.sub(lambda m: "`" + apply_renaming(m.group(1), names) + "`", prompt)
    return new_prompt, apply_renaming(solution, names)


def typechecks(sources: Sequence[str], workers: int = 2) -> List[bool]:
    """Whether each OCaml source type-checks on its own (``ocamlc -i``).

    One ``ocamlc -i`` reads many files: each is its own compilation unit (``-i`` writes no ``.cmi``, so no file
    sees another), in order, up to the first that fails, which the error names; that one is checked alone, and
    the files after it go on in one run. A few processes instead of one per source."""
    from sweeprl.ocaml.toolchain import require_ocaml

    ocamlc = require_ocaml()
    with tempfile.TemporaryDirectory(prefix="sweeprl-variants-") as tmp:
        names = [f"sweeprl_check_{i}.ml" for i in range(len(sources))]
        for name, source in zip(names, sources):
            (Path(tmp) / name).write_text(source)

        def check(chunk: List[int]) -> Dict[int, bool]:
            ok: Dict[int, bool] = {}
            while chunk:
                done = subprocess.run(
                    [ocamlc, "-i", "-w", "-a", *(names[i] for i in chunk)], capture_output=True, cwd=tmp
                )
                if done.returncode == 0:
                    return {**ok, **dict.fromkeys(chunk, True)}
                failed = re.search(rb'File "sweeprl_check_(\d+)\.ml"', done.stderr)
                at = chunk.index(int(failed.group(1))) if failed and int(failed.group(1)) in chunk else -1
                if at < 0 or _typechecks_alone(ocamlc, tmp, names[chunk[at]]):  # not the file named: one at a time
                    return {**ok, **{i: _typechecks_alone(ocamlc, tmp, names[i]) for i in chunk}}
                ok.update(dict.fromkeys(chunk[:at], True))
                ok[chunk[at]] = False
                chunk = chunk[at + 1 :]
            return ok

        indices = list(range(len(sources)))
        size = -(-len(indices) // max(1, workers)) or 1
        with ThreadPoolExecutor(max(1, workers)) as pool:
            results: Dict[int, bool] = {}
            for part in pool.map(check, [indices[k : k + size] for k in range(0, len(indices), size)]):
                results.update(part)
        return [results[i] for i in indices]


def _typechecks_alone(ocamlc: str, cwd: str, name: str) -> bool:
    return subprocess.run([ocamlc, "-i", "-w", "-a", name], capture_output=True, cwd=cwd).returncode == 0


def variants(problems: Sequence[Mapping[str, str]], count: int, seed: int) -> List[Tuple[str, str]]:
    """Up to ``count`` renamed (prompt, solution) pairs per problem (fewer when some do not type-check), in
    problem order; ``problems`` are mappings with ``prompt`` and ``reference_solution``."""
    rng = random.Random(seed)
    made = [rename_problem(p["prompt"], p["reference_solution"], rng) for p in problems for _ in range(max(0, count))]
    ok = typechecks([solution for _, solution in made])
    return [pair for pair, good in zip(made, ok) if good]


__all__ = ["apply_renaming", "kept_names", "rename_problem", "renaming", "tokens", "typechecks", "variants"]
