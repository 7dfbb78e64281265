"""A reward of your own: any function with TRL's signature, named in reward.funcs by its import path."""


def brevity(completions, max_chars=200, **kwargs):
    """1 for an answer of at most max_chars characters, falling to 0 at twice that (kwargs: TRL's keywords and
    every dataset column, e.g. tests, task_id)."""
    return [max(0.0, min(1.0, 2 - len(c) / max_chars)) for c in completions]
