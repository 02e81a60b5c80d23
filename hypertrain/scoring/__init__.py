"""Scoring: the challenge registry, the scorers and their sandboxed worker process.

Importing this package does not import torch. Modules: ``registry`` (challenges), ``inputs``
(strict parsers of a job's files, input-name rule), ``jobs`` (job files on disk, the pinned
``SCORING_ENV``), ``delta_loss`` and ``step_throughput`` (the scorers, torch), ``scorers``
(dispatch, torch), ``audit`` (the worker's audit-hook policy), ``worker`` (``python -m
hypertrain.scoring.worker``), ``outcome`` (``ScoreOutcome``, classification), ``sandbox``
(``run_scorer``, ``score_inline``), ``warm`` (``open_warm_scorer``: each job in a sandboxed
child forked from one warm ``forkserver`` process; ``warmup``: its passes on synthetic inputs),
``hostile`` (test-only escape attempts).
"""

from hypertrain.scoring.inputs import BadInput, check_input_name
from hypertrain.scoring.jobs import SCORING_ENV, check_job_inputs
from hypertrain.scoring.outcome import ScoreOutcome, classify
from hypertrain.scoring.registry import (
    DELTA_LOSS,
    FAILURE_CLASSES,
    INCONCLUSIVE,
    REGISTRY,
    STEP_THROUGHPUT,
    Challenge,
    ChallengeKind,
    FailureClass,
    UnknownChallenge,
    get_challenge,
)
from hypertrain.scoring.sandbox import run_scorer, score_inline

__all__ = [
    "DELTA_LOSS",
    "FAILURE_CLASSES",
    "INCONCLUSIVE",
    "REGISTRY",
    "SCORING_ENV",
    "STEP_THROUGHPUT",
    "BadInput",
    "Challenge",
    "ChallengeKind",
    "FailureClass",
    "ScoreOutcome",
    "UnknownChallenge",
    "check_input_name",
    "check_job_inputs",
    "classify",
    "get_challenge",
    "run_scorer",
    "score_inline",
]
