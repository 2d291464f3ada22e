"""Which optional install brings a missing third-party module: a command that needs one says so in one
line (the extra's name and the pip line) instead of ending in a bare ModuleNotFoundError."""

from __future__ import annotations

#: third-party modules that come with an extra (pyproject.toml's [project.optional-dependencies]), not with
#: the serving install (`make run`, `pip install -e .`)
EXTRA_OF = {
    "optuna": "tune",
    "tqdm": "tune",
    "scipy": "tune",
    "ml_dtypes": "tune",
    "torch": "torch",
    "torch_npu": "npu",
}


def missing_extra(e: ModuleNotFoundError, command: str) -> str | None:
    """The one line for ``e`` where an extra brings the missing module (None: a module no extra brings,
    whose traceback is the caller's to show)."""
    top = (e.name or "").split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return None
    return (f"{command}: needs {top}, which comes with bcetune's '{extra}' extra: pip install -e '.[{extra}]' "
            "(or `make dev`: every extra, no tests run)")  # fmt: skip
