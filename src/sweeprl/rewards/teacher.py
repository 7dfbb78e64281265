"""``reward=teacher_relative``: the student's score relative to a teacher's score (RLAIF).

For every completion::

    reward = clip(student_score / (teacher_score + epsilon), 0, max_reward)

then, when ``reward_threshold`` is set, a reward below it is dropped (``below_threshold=drop``: ``None``, which
TRL turns into NaN and leaves out of that reward's statistics) or set to 0 (``below_threshold=zero``).

Two scorers (``scorer``):

- ``reference`` (default): a deterministic scorer judges the student's completion and the problem's
  ``reference_solution`` (dataset column, with the end marker appended) alike. ``reference_scorer`` chooses it:
  ``ocaml_syntax_aware`` (the composite reward of :mod:`sweeprl.rewards.ocaml`, built from
  ``reference_kwargs``) or ``tests_pass_rate`` (passed tests / all tests, same machinery; when the whole code
  does not compile no test runs and the rate is 0; ``min_code_lines`` defaults to 1 here because a short
  correct answer passes its tests). The dataset must have ``tests`` and ``reference_solution`` columns.
- ``judge``: an LLM judge behind an OpenAI-compatible ``/chat/completions`` endpoint scores
  ``(prompt, completion)`` pairs (settings in :data:`JUDGE_DEFAULTS`). The teacher score is the judge's score
  of the problem's reference solution when the problem has one, **else 1.0** (so the reward is the judge's
  score itself). A judge failure (timeout, HTTP error after the retries, an answer without a score) makes
  that sample's reward ``None`` -- never 0 -- is logged once per error kind per batch and counted.

In both modes a sample whose problem has no reference solution gets teacher score 1.0 (a warning the first time);
in ``reference`` mode a dataset without the ``reference_solution`` column at all is a configuration error.
Teacher scores are cached in memory for the life of the reward function, keyed by (problem id, sha256 of the
reference solution, scorer settings); judge answers are cached on disk as JSON (``judge.cache_dir``).

Per step, through TRL's ``log_metric``: ``rewards/teacher/student_score``, ``rewards/teacher/teacher_score``
(means over the samples that have them), ``rewards/teacher/ratio`` (mean clipped ratio, before the
threshold), ``rewards/teacher/dropped_fraction`` (samples below ``reward_threshold``) and
``rewards/teacher/missing_fraction`` (samples without a reward because the judge failed). The returned
callable carries the running counters as ``fn.stats`` (:class:`TeacherStats`).

:func:`best_of_n` summarises a batch of rewards as the mean over prompts of each prompt's best reward.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import math
import os
import re
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from sweeprl.rewards import completion_text, register
from sweeprl.rewards.best_of_n import best_of_n  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)

SCORERS = ("reference", "judge")
REFERENCE_SCORERS = ("ocaml_syntax_aware", "tests_pass_rate")
BELOW_THRESHOLD = ("drop", "zero")
METRIC_PREFIX = "rewards/teacher"
MAX_RETRY_AFTER = 60.0  # seconds: a longer Retry-After is capped

DEFAULT_PROMPT_TEMPLATE = (
    "You are grading an answer to a programming problem.\n\n"
    "Problem:\n{prompt}\n\n"
    "Answer:\n{completion}\n\n"
    "Rate the correctness and quality of the answer on a scale from 0 (useless) to 10 (perfect). "
    "Reply with one line of the form 'Score: N' and nothing else."
)

#: ``judge`` settings of ``reward=teacher_relative`` and their defaults.
JUDGE_DEFAULTS: Dict[str, Any] = {
    "base_url": None,  # e.g. http://127.0.0.1:8000/v1 (required)
    "model": None,  # model name sent to the endpoint (required)
    "api_key_env": None,  # env var holding the key; unset name or unset variable -> no Authorization header
    "prompt_template": DEFAULT_PROMPT_TEMPLATE,  # {prompt} and {completion} are substituted
    "score_regex": r"-?\d+(?:\.\d+)?",  # first match (group 1 when the regex has a group) is the score
    "score_scale": 10.0,  # the parsed number is divided by this
    "max_concurrency": 4,  # requests in flight at once, per judge client
    "timeout": 30.0,  # seconds per HTTP request (socket timeout)
    "max_retries": 3,  # retries after the first attempt (timeouts, connection errors, 408, 429, 5xx)
    "backoff_base": 0.5,  # seconds; retry k waits backoff_base * 2**k, or Retry-After on HTTP 429
    "cache_dir": None,  # default <output_dir>/judge_cache, else a fresh temp dir
    "temperature": 0.0,
    "max_tokens": 32,
}


# ----------------------------------------------------------------------------------------------- helpers
def relative_reward(student: float, teacher: float, epsilon: float, max_reward: float) -> float:
    """``clip(student / (teacher + epsilon), 0, max_reward)``."""
    return min(max(student / (teacher + epsilon), 0.0), max_reward)


def prompt_text(prompt: Any) -> str:
    """The problem text of a TRL prompt: the string itself, or the user messages of a conversation."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence) and all(isinstance(m, Mapping) for m in prompt):
        users = [str(m.get("content", "")) for m in prompt if m.get("role") == "user"]
        return "\n\n".join(users or [str(m.get("content", "")) for m in prompt])
    return str(prompt)


def _sha256(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class TeacherStats:
    """Running counters of one ``teacher_relative`` reward function (thread-safe increments)."""

    calls: int = 0
    samples: int = 0
    teacher_cache_hits: int = 0
    teacher_cache_misses: int = 0  # = teacher scorings started
    judge_requests: int = 0  # HTTP attempts, retries included
    judge_cache_hits: int = 0  # answers read from the on-disk cache
    missing: int = 0  # samples without a reward (judge failures)
    dropped: int = 0  # samples below reward_threshold
    no_reference: int = 0  # samples whose problem had no reference solution (teacher score 1.0)
    errors: Dict[str, int] = field(default_factory=dict)  # judge failures by kind
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def add_error(self, kind: str) -> None:
        with self._lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1

    def as_dict(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}


# ------------------------------------------------------------------------------------------------ judge
@dataclass
class JudgeResult:
    """A judge verdict: ``score`` (already divided by ``score_scale``) or ``error`` (kind) and ``detail``."""

    score: Optional[float] = None
    error: Optional[str] = None
    detail: str = ""
    cached: bool = False
    attempts: int = 0


class _JudgeFailure(Exception):
    def __init__(self, kind: str, detail: str, retry: bool, retry_after: Optional[float] = None):
        super().__init__(detail)
        self.kind, self.detail, self.retry, self.retry_after = kind, detail, retry, retry_after


def judge_settings(given: Optional[Mapping[str, Any]], output_dir: Optional[str] = None) -> Dict[str, Any]:
    """Validated judge settings: :data:`JUDGE_DEFAULTS` overridden by ``given``; ``cache_dir`` resolved."""
    given = dict(given or {})
    unknown = set(given) - set(JUDGE_DEFAULTS)
    if unknown:
        raise ValueError(
            f"teacher_relative judge: unknown setting(s) {sorted(unknown)}; allowed: {', '.join(JUDGE_DEFAULTS)}"
        )
    s = {**JUDGE_DEFAULTS, **given}
    for key in ("base_url", "model"):
        if not s[key]:
            raise ValueError(f"teacher_relative judge: judge.{key} is required with scorer=judge")
    if "{completion}" not in s["prompt_template"]:
        raise ValueError("teacher_relative judge: judge.prompt_template must contain {completion}")
    re.compile(s["score_regex"])
    if (
        float(s["score_scale"]) <= 0
        or int(s["max_concurrency"]) < 1
        or float(s["timeout"]) <= 0
        or int(s["max_retries"]) < 0
    ):
        raise ValueError(
            "teacher_relative judge: need score_scale > 0, max_concurrency >= 1, timeout > 0, max_retries >= 0"
        )
    if not s["cache_dir"]:
        s["cache_dir"] = (
            str(Path(output_dir) / "judge_cache") if output_dir else tempfile.mkdtemp(prefix="sweeprl-judge-cache-")
        )
    return s


class JudgeClient:
    """Scores ``(prompt, completion)`` pairs with an LLM behind an OpenAI-compatible chat-completions API.

    Standard library only (``urllib.request``); at most ``max_concurrency`` requests in flight per client
    (a semaphore, also across concurrent :meth:`score_many` calls); retries with exponential backoff;
    answers that yielded a score are cached on disk, one JSON file per sha256 of (rendered judge prompt,
    completion, model). Never raises for what the endpoint does: failures come back as :class:`JudgeResult`
    with ``error`` set.
    """

    def __init__(self, settings: Mapping[str, Any], stats: Optional[TeacherStats] = None):
        self.s = dict(settings)
        self.url = str(self.s["base_url"]).rstrip("/") + "/chat/completions"
        self.regex = re.compile(self.s["score_regex"])
        self.cache_dir = Path(self.s["cache_dir"])
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.stats = stats or TeacherStats()
        self._slots = threading.BoundedSemaphore(int(self.s["max_concurrency"]))

    def render(self, prompt: str, completion: str) -> str:
        values = {"prompt": prompt, "completion": completion}
        return re.sub(r"\{(prompt|completion)\}", lambda m: values[m.group(1)], self.s["prompt_template"])

    def cache_key(self, prompt: str, completion: str) -> str:
        return _sha256({"prompt": self.render(prompt, completion), "completion": completion, "model": self.s["model"]})

    def parse(self, answer: str) -> Optional[float]:
        m = self.regex.search(answer or "")
        if m is None:
            return None
        try:
            value = float(m.group(1) if m.groups() else m.group(0))
        except (TypeError, ValueError):
            return None
        return value / float(self.s["score_scale"]) if math.isfinite(value) else None

    def score(self, prompt: str, completion: str) -> JudgeResult:
        """One verdict: from the disk cache when present, else from the endpoint."""
        key = self.cache_key(prompt, completion)
        path = self.cache_dir / f"{key}.json"
        cached = self._read_cache(path)
        if cached is not None:
            value = self.parse(cached)
            if value is not None:
                self.stats.add("judge_cache_hits")
                return JudgeResult(score=value, cached=True)
        result = self._ask(self.render(prompt, completion))
        if result.error is None:
            value = self.parse(result.detail)
            if value is None:
                return JudgeResult(
                    error="unparsable",
                    detail=f"no score in judge answer {result.detail[:200]!r}",
                    attempts=result.attempts,
                )
            self._write_cache(path, {"model": self.s["model"], "answer": result.detail})
            return JudgeResult(score=value, attempts=result.attempts)
        return result

    def score_many(self, pairs: Sequence[Tuple[str, str]]) -> List[JudgeResult]:
        """Verdicts for ``(prompt, completion)`` pairs, in order, up to ``max_concurrency`` at a time."""
        if not pairs:
            return []
        with ThreadPoolExecutor(max_workers=min(len(pairs), int(self.s["max_concurrency"]))) as pool:
            return list(pool.map(lambda p: self._score_safely(p[0], p[1]), pairs))

    def _score_safely(self, prompt: str, completion: str) -> JudgeResult:
        try:
            return self.score(prompt, completion)
        except Exception as e:  # noqa: BLE001  (a judge problem must cost a sample, not the trial)
            return JudgeResult(error="internal", detail=f"{type(e).__name__}: {e}")

    # -- HTTP
    def _ask(self, content: str) -> JudgeResult:
        attempts = 0
        retries = int(self.s["max_retries"])
        while True:
            attempts += 1
            try:
                with self._slots:
                    self.stats.add("judge_requests")
                    answer = self._request(content)
                return JudgeResult(detail=answer, attempts=attempts)
            except _JudgeFailure as f:
                if not f.retry or attempts > retries:
                    suffix = f" after {attempts} attempt(s)" if f.retry else ""
                    return JudgeResult(error=f.kind, detail=f.detail + suffix, attempts=attempts)
                delay = (
                    f.retry_after if f.retry_after is not None else float(self.s["backoff_base"]) * 2 ** (attempts - 1)
                )
                log.debug("judge %s (%s); retry %d/%d in %.2fs", f.kind, f.detail, attempts, retries, delay)
                time.sleep(delay)

    def _request(self, content: str) -> str:
        body = {
            "model": self.s["model"],
            "messages": [{"role": "user", "content": content}],
            "temperature": self.s["temperature"],
            "max_tokens": self.s["max_tokens"],
        }
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.s["api_key_env"]) if self.s["api_key_env"] else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=float(self.s["timeout"])) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            code = e.code
            retry_after = _retry_after(e.headers.get("Retry-After")) if code == 429 and e.headers else None
            e.close()
            retry = code in (408, 429) or code >= 500
            raise _JudgeFailure(f"http_{code}", f"HTTP {code} from {self.url}", retry, retry_after) from None
        except http.client.HTTPException as e:  # truncated or garbled HTTP (IncompleteRead, BadStatusLine)
            raise _JudgeFailure("connection", f"broken HTTP response from {self.url}: {e!r}", True) from None
        except (TimeoutError, OSError) as e:  # socket timeout, URLError (an OSError), connection reset
            reason = getattr(e, "reason", e)
            kind = "timeout" if isinstance(reason, TimeoutError) or "timed out" in str(reason) else "connection"
            raise _JudgeFailure(kind, f"{kind} talking to {self.url}: {reason}", True) from None
        try:
            data = json.loads(raw)
            return str(data["choices"][0]["message"]["content"])
        except (ValueError, KeyError, IndexError, TypeError):
            raise _JudgeFailure("bad_response", f"not a chat-completions response: {raw[:200]!r}", False) from None

    @staticmethod
    def _read_cache(path: Path) -> Optional[str]:
        try:
            return str(json.loads(path.read_text())["answer"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @staticmethod
    def _write_cache(path: Path, record: Mapping[str, Any]) -> None:
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_text(json.dumps(record))
            os.replace(tmp, path)
        except OSError as e:
            log.warning("judge cache: cannot write %s: %s", path, e)


def _retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds of a ``Retry-After`` header (the delay-seconds form; an HTTP date falls back to backoff)."""
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER) if value is not None else None
    except ValueError:
        return None


# --------------------------------------------------------------------------------------- the reward
def _ocaml_scorer(reference_scorer: str, reference_kwargs: Mapping[str, Any]) -> Tuple[Any, Callable[[Any], float]]:
    from sweeprl.rewards.ocaml import OCamlScorer
    from sweeprl.sandbox import Limits

    kw = dict(reference_kwargs)
    if isinstance(kw.get("limits"), Mapping):
        kw["limits"] = Limits(**kw["limits"])
    if reference_scorer == "tests_pass_rate":
        kw.setdefault("min_code_lines", 1)
    scorer = OCamlScorer(**kw)

    def pass_rate(s: Any) -> float:
        if s.compiled != "full" or not s.tests_total or "SPAWNED_PROCESSES" in s.test_results:
            return 0.0
        return s.tests_passed / s.tests_total

    value = (lambda s: float(s.reward)) if reference_scorer == "ocaml_syntax_aware" else pass_rate
    return scorer, value


@register("teacher_relative")
def teacher_relative(
    scorer: str = "reference",
    epsilon: float = 1e-6,
    max_reward: float = 2.0,
    reward_threshold: Optional[float] = None,
    below_threshold: str = "drop",
    reference_scorer: str = "ocaml_syntax_aware",
    reference_kwargs: Optional[Mapping[str, Any]] = None,
    judge: Optional[Mapping[str, Any]] = None,
    output_dir: Optional[str] = None,
    max_completion_length: Optional[int] = None,
):
    """Factory of the ``teacher_relative`` TRL reward (see the module docstring).

    ``reference_kwargs`` go to :class:`sweeprl.rewards.ocaml.OCamlScorer` (``limits`` may be a mapping);
    ``judge`` holds the settings of :data:`JUDGE_DEFAULTS`. ``output_dir`` and ``max_completion_length``
    are filled in by the trial (default judge cache dir; detection of truncated completions).
    """
    if scorer not in SCORERS:
        raise ValueError(f"teacher_relative: scorer={scorer!r}; allowed: {', '.join(SCORERS)}")
    if reference_scorer not in REFERENCE_SCORERS:
        raise ValueError(
            f"teacher_relative: reference_scorer={reference_scorer!r}; allowed: {', '.join(REFERENCE_SCORERS)}"
        )
    if below_threshold not in BELOW_THRESHOLD:
        raise ValueError(
            f"teacher_relative: below_threshold={below_threshold!r}; allowed: {', '.join(BELOW_THRESHOLD)}"
        )
    if not epsilon > 0 or not max_reward > 0:
        raise ValueError(f"teacher_relative: need epsilon > 0 and max_reward > 0 (got {epsilon}, {max_reward})")
    reference_kwargs = dict(reference_kwargs or {})
    end_marker = str(reference_kwargs.get("end_marker", "(* END *)"))
    stats = TeacherStats()
    teacher_cache: Dict[Tuple[str, str, str], float] = {}
    cache_lock = threading.Lock()

    if scorer == "reference":
        ocaml, value_of = _ocaml_scorer(reference_scorer, reference_kwargs)
        settings_key = _sha256(["reference", reference_scorer, reference_kwargs])
        client: Optional[JudgeClient] = None
    else:
        client = JudgeClient(judge_settings(judge, output_dir), stats)
        settings_key = _sha256(["judge", {k: v for k, v in client.s.items() if k != "cache_dir"}])

    def teacher_relative(
        completions,
        prompts=None,
        tests=None,
        reference_solution=None,
        id=None,  # noqa: A002
        completion_ids=None,
        log_metric=None,
        **_,
    ) -> List[Optional[float]]:
        n = len(completions)
        stats.add("calls")
        stats.add("samples", n)
        texts = [completion_text(c) for c in completions]
        refs: List[Optional[str]] = list(reference_solution) if reference_solution is not None else [None] * n
        ids: List[Optional[Any]] = list(id) if id is not None else [None] * n
        problems = [prompt_text(p) for p in (prompts if prompts is not None else [None] * n)]
        if client is None:
            if tests is None:
                raise KeyError("reward teacher_relative (scorer=reference) needs a 'tests' column in the dataset")
            if reference_solution is None:
                raise KeyError(
                    "reward teacher_relative (scorer=reference) needs a 'reference_solution' column in the "
                    "dataset (or use scorer=judge, whose teacher score falls back to 1.0)"
                )

        # Teacher keys; the ones not cached yet are scored together with the students.
        keys: List[Optional[Tuple[str, str, str]]] = []
        todo: Dict[Tuple[str, str, str], int] = {}  # key -> index of the sample that carries it
        with cache_lock:
            for i, ref in enumerate(refs):
                if not ref:
                    keys.append(None)
                    continue
                key = (str(ids[i]) if ids[i] is not None else "", _sha256(ref), settings_key)
                keys.append(key)
                if key in teacher_cache or key in todo:
                    stats.add("teacher_cache_hits")
                else:
                    stats.add("teacher_cache_misses")
                    todo[key] = i
        no_ref = sum(k is None for k in keys)
        if no_ref:
            first = stats.no_reference == 0
            stats.add("no_reference", no_ref)
            (log.warning if first else log.debug)(
                "teacher_relative: %d of %d sample(s) have no reference solution; their teacher score is 1.0%s",
                no_ref,
                n,
                " (logged once; counted in fn.stats.no_reference)" if first else "",
            )
        teacher_jobs = list(todo.items())
        teacher_texts = [refs[i].rstrip("\n") + "\n" + end_marker for _, i in teacher_jobs]  # type: ignore[union-attr]

        errors: Dict[str, Tuple[int, str]] = {}
        if client is None:
            truncated = [
                bool(max_completion_length and c is not None and len(c) >= max_completion_length)
                for c in (completion_ids or [None] * n)
            ]
            jobs = [(t, tests[i], truncated[i]) for i, t in enumerate(texts)]
            jobs += [(t, tests[i], False) for t, (_, i) in zip(teacher_texts, teacher_jobs)]
            values: List[Optional[float]] = [value_of(s) for s in ocaml.score_many(jobs)]
        else:
            pairs = [(problems[i], t) for i, t in enumerate(texts)]
            pairs += [(problems[i], t) for t, (_, i) in zip(teacher_texts, teacher_jobs)]
            values = []
            for r in client.score_many(pairs):
                if r.error is not None:
                    stats.add_error(r.error)
                    count, detail = errors.get(r.error, (0, r.detail))
                    errors[r.error] = (count + 1, detail)
                values.append(r.score)
        student = values[:n]
        with cache_lock:
            for (key, _), v in zip(teacher_jobs, values[n:]):
                if v is not None:  # a failed teacher judgement is retried at the next call
                    teacher_cache[key] = v
            teacher = [1.0 if k is None else teacher_cache.get(k) for k in keys]

        out: List[Optional[float]] = []
        ratios: List[float] = []
        missing = dropped = 0
        for s, t in zip(student, teacher):
            if s is None or t is None:
                missing += 1
                out.append(None)
                continue
            r = relative_reward(s, t, epsilon, max_reward)
            ratios.append(r)
            if reward_threshold is not None and r < reward_threshold:
                dropped += 1
                out.append(None if below_threshold == "drop" else 0.0)
            else:
                out.append(r)
        stats.add("missing", missing)
        stats.add("dropped", dropped)
        for kind, (count, detail) in sorted(errors.items()):
            log.warning(
                "teacher_relative judge: %d request(s) failed with %s (e.g. %s); their samples get no reward",
                count,
                kind,
                detail,
            )

        if log_metric is not None:
            for name, vals in (
                ("student_score", [s for s in student if s is not None]),
                ("teacher_score", [t for t in teacher if t is not None]),
                ("ratio", ratios),
            ):
                if vals:
                    log_metric(f"{METRIC_PREFIX}/{name}", sum(vals) / len(vals))
            log_metric(f"{METRIC_PREFIX}/dropped_fraction", dropped / max(1, n))
            log_metric(f"{METRIC_PREFIX}/missing_fraction", missing / max(1, n))
        return out

    teacher_relative.stats = stats  # type: ignore[attr-defined]
    teacher_relative.judge_client = client  # type: ignore[attr-defined]
    return teacher_relative


__all__ = [
    "JUDGE_DEFAULTS",
    "JudgeClient",
    "JudgeResult",
    "TeacherStats",
    "best_of_n",
    "judge_settings",
    "relative_reward",
    "teacher_relative",
]
