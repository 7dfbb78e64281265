"""Rewards that score the completion text alone (no execution)."""

from __future__ import annotations

from typing import List

from sweeprl.rewards import completion_text, register


@register("length")
def length_reward(max_words: float = 16.0, offset: float = 2.0):
    """The classic "shorter is better" reward of the PPO length experiment: ``offset - n / max_words``
    with ``n`` the number of whitespace-separated words (default 2 - n/16)."""
    if max_words <= 0:
        raise ValueError(f"length reward: max_words={max_words} must be > 0")

    def length(completions, **_) -> List[float]:
        return [offset - len(completion_text(c).split()) / max_words for c in completions]

    return length


@register("charset")
def charset_reward(charset: str = "abcdefghijklmnopqrstuvwxyz ", min_distinct: int = 0):
    """Fraction of the completion's characters that belong to ``charset`` (0 for an empty completion), times
    ``min(1, d / min_distinct)`` with ``d`` the number of distinct allowed characters used (``min_distinct=0``
    turns that factor off).

    Learnable by the random-init tiny model in tens of CPU updates: the output distribution only has to move
    mass onto the allowed bytes, which makes it the quickstart's reward. The diversity factor makes the
    degenerate optimum ("aaaaaaaa") score low, so a too-high learning rate that collapses the policy onto one
    character shows up as a reward that peaks and then falls, as in real runs.
    """
    allowed = frozenset(charset)
    if not allowed:
        raise ValueError("charset reward: charset must not be empty")
    if min_distinct < 0:
        raise ValueError(f"charset reward: min_distinct={min_distinct} must be >= 0")

    def score(completions, **_) -> List[float]:
        out = []
        for c in completions:
            text = completion_text(c)
            if not text:
                out.append(0.0)
                continue
            hits = [ch for ch in text if ch in allowed]
            value = len(hits) / len(text)
            if min_distinct:
                value *= min(1.0, len(set(hits)) / min_distinct)
            out.append(value)
        return out

    return score
