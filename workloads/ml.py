"""scikit-learn work on a dataset that ships inside scikit-learn (no download).

scikit-learn is imported when asked for, not with this module: importing it
costs about 2 s of CPU (it brings SciPy), which every process that lists the
workloads without running one (a bench tool, the test suite's workers) would
otherwise pay. A forked server imports it before it forks (preload), and each worker
trains the predict model in its warm-up (workloads/registry.py's warm_up),
before anything is timed; a lazy one (lazy(): server.py --lazy-ml) leaves
both to the worker's first predict or train, inside that run's time.
"""

from __future__ import annotations

import os
import threading
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from sklearn.base import ClassifierMixin

# "1" in the environment of a process whose warm-up leaves scikit-learn for the first predict or train (server.py
# --lazy-ml sets it for itself and the workers it starts, which inherit it; the test suite sets it for every lab).
LAZY_ENV = "LAB_LAZY_ML"


def lazy() -> bool:
    """Whether this process's warm-up leaves scikit-learn and the predict model for their first use."""
    return os.environ.get(LAZY_ENV) == "1"


def preload() -> None:
    """Import what train and predict use, now: a forked server's parent does, once for all its children."""
    import sklearn.datasets  # noqa: PLC0415 (the module's docstring)
    import sklearn.ensemble  # noqa: PLC0415
    import sklearn.model_selection  # noqa: PLC0415, F401


# The datasets by name: each sklearn.datasets' load_<name>.
DATASETS = ("digits", "iris", "wine", "breast_cancer")

# The model behind `predict`: trained once per process, on first use.
PREDICT_MODEL_TREES = 100


@cache
def _dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    # Reading the bundled CSV costs ~20 ms; cache it so `train` measures fitting.
    from sklearn import datasets  # noqa: PLC0415 (on first use: the module's docstring)

    x, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    return x, y


def train(dataset: str, trees: int) -> float:
    """Fit a random forest (one thread, fixed seed); return held-out accuracy."""
    from sklearn.ensemble import RandomForestClassifier  # noqa: PLC0415 (on first use: the module's docstring)
    from sklearn.model_selection import train_test_split  # noqa: PLC0415

    x, y = _dataset(dataset)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    model = RandomForestClassifier(n_estimators=trees, random_state=0, n_jobs=1)
    model.fit(x_train, y_train)
    return round(float(model.score(x_test, y_test)), 6)


_model_lock = threading.Lock()
_model: ClassifierMixin | None = None


def predictor() -> ClassifierMixin:
    """The process's `predict` model, trained on first call and never again."""
    global _model
    with _model_lock:  # two threads asking at once must not train twice
        if _model is None:
            from sklearn.ensemble import RandomForestClassifier  # noqa: PLC0415 (on first use: the docstring)

            x, y = _dataset("digits")
            model = RandomForestClassifier(n_estimators=PREDICT_MODEL_TREES, random_state=0, n_jobs=1)
            _model = model.fit(x, y)
        return _model


def predict(rows: int) -> int:
    """Classify `rows` digit images (the dataset, repeated); return the sum of the labels."""
    model = predictor()
    x, _ = _dataset("digits")
    total = 0
    done = 0
    while done < rows:
        batch = x[: min(len(x), rows - done)]
        total += int(model.predict(batch).sum())
        done += len(batch)
    return total


# Pinned to the scikit-learn version in requirements.txt: a different version
# may grow different trees, and this table is how we would notice.
KNOWN_ANSWERS: list[tuple[str, dict[str, Any], Any]] = [
    ("train", {"dataset": "digits", "trees": 10}, 0.94),
    ("train", {"dataset": "iris", "trees": 50}, 0.973684),
    ("train", {"dataset": "wine", "trees": 50}, 0.977778),
    ("train", {"dataset": "breast_cancer", "trees": 10}, 0.951049),
    ("predict", {"rows": 1}, 0),
    ("predict", {"rows": 100}, 426),
    ("predict", {"rows": 1797}, 8070),
    ("predict", {"rows": 5000}, 22443),
]
