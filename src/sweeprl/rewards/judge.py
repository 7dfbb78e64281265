"""The LLM judge of ``reward=teacher_relative`` (``scorer=judge``): an OpenAI-compatible ``/chat/completions``
client with bounded concurrency, retries with exponential backoff (honouring ``Retry-After``), a score parsed
by regex, and an on-disk cache keyed by (prompt, completion, judge model). Settings: :data:`JUDGE_DEFAULTS`."""

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
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

log = logging.getLogger(__name__)


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


def sha256_of(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


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
        return sha256_of(
            {"prompt": self.render(prompt, completion), "completion": completion, "model": self.s["model"]}
        )

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
