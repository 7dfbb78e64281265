"""Optuna storages for the sweeper, through Optuna's public storage API only.

The sweeper creates the storage object itself and keeps its own reference (``Study`` has no public accessor for
its storage), so heartbeats, trial ids and re-opening after Ctrl-C use public :class:`BaseStorage` methods.
"""

import time
import warnings
from typing import Any, Dict, Iterable, Optional

# Hydra's plugin scan executes this module on every command: Optuna is imported where it is used.


def _quiet_heartbeat_warnings() -> None:
    """Optuna marks its heartbeat API (storage heartbeats, fail_stale_trials, the stale-trial retry callback) as
    experimental and warns when heartbeats are used outside Study.optimize; the sweeper uses both on purpose, so
    these warnings would only be noise at the top of every sweep log (and errors under ``python -Werror``)."""
    import optuna

    warnings.filterwarnings(
        "ignore",
        category=optuna.exceptions.ExperimentalWarning,
        message=r".*(heartbeat|fail_stale_trials|RetryHeartbeatStaleTrialCallback).*",
    )
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def public_url(url: Optional[str]) -> Optional[str]:
    """``url`` without its password, to be written down (``optimization_results.yaml``): a PostgreSQL/MySQL URL
    keeps user, host and database, and whoever opens it again supplies the password as the sweep did (the
    driver's environment: ``PGPASSWORD``, ``~/.pgpass``, or an ``${oc.env:…}`` in the URL). Other storages
    (SQLite, journal files) are returned unchanged; ``None`` (in memory) stays ``None``."""
    if not url or "://" not in url or url.startswith("sqlite"):
        return url
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return url.split("://", 1)[0] + "://…"  # unparseable: never write what might be a secret
    # URL is a NamedTuple; its set() treats password=None as "unchanged"
    return parsed._replace(password=None).render_as_string(hide_password=False) if parsed.password else url


def make_storage(
    url: Optional[str],
    heartbeat_interval: Optional[int] = None,
    grace_period: Optional[int] = None,
    max_retry: int = 0,
) -> Any:
    """In-memory storage for ``None``, journal storage for ``*.log``/``*.journal`` files, else an RDB storage
    (SQLite with a generous lock timeout).

    With ``heartbeat_interval`` (RDB only), RUNNING trials whose heartbeat is older than ``grace_period`` (their
    driver died) are failed by ``optuna.storages.fail_stale_trials`` and their configs re-queued (``max_retry``
    times; at least once). Journal storages have no heartbeat: stale trials there stay RUNNING and are not counted.
    """
    import optuna

    _quiet_heartbeat_warnings()
    if url is None:
        return optuna.storages.InMemoryStorage()
    if url.endswith((".log", ".journal")) and "://" not in url:
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url))
    engine_kwargs: Dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}
    kwargs: Dict[str, Any] = {}
    if heartbeat_interval:
        kwargs = {
            "heartbeat_interval": heartbeat_interval,
            "grace_period": grace_period,
            "heartbeat_stale_trial_callback": optuna.storages.RetryHeartbeatStaleTrialCallback(
                max_retry=max(1, max_retry)
            ),
        }
    # Several drivers starting at once race to create the schema; the losers retry.
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **kwargs)
        except Exception:  # noqa: BLE001 - sqlalchemy IntegrityError/OperationalError during concurrent creation
            if attempt == 4:
                raise
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


def trial_id(storage: Any, study_name: str, number: int) -> int:
    """The storage's id of trial ``number`` (``Trial._trial_id`` is private; these two storage methods are not)."""
    study_id = storage.get_study_id_from_name(study_name)
    return storage.get_trial_id_from_study_id_trial_number(study_id, number)


def load_live_trial(storage: Any, study_name: str, number: int, pruner: Any = None) -> Any:
    """A live :class:`optuna.trial.Trial` for an existing RUNNING trial, e.g. in the trial's own process, which
    reports intermediate values and asks ``should_prune`` through the storage.

    Optuna has no public way to get a ``Trial`` (not a ``FrozenTrial``) for a trial asked elsewhere
    (optuna/optuna#2987), so this calls the ``Trial(study, trial_id)`` constructor, with the id found through the
    public storage methods.
    """
    import optuna

    study = optuna.load_study(study_name=study_name, storage=storage, pruner=pruner)
    return optuna.trial.Trial(study, trial_id(storage, study_name, number))


def record_heartbeat(storage: Any, trial_ids: Iterable[int]) -> None:
    """One heartbeat for each trial id (RDB storages with heartbeats; a no-op for the others)."""
    if not hasattr(storage, "record_heartbeat"):  # BaseHeartbeat is not exported; its method is public
        return
    for tid in trial_ids:
        try:
            storage.record_heartbeat(tid)
        except Exception:  # noqa: BLE001 - a heartbeat must never break the sweep
            pass
