"""Folders a server makes in the temporary directory, named for its pid, and what a killed server left there.

A server removes its folders when it stops; one killed outright (SIGKILL, a
crash) cannot. Each folder's name carries the pid that made it
(`lab-page-<pid>-xxxx`), so the next server to make one removes those whose
process is gone.
"""

from __future__ import annotations

import os
import shutil
import tempfile


def scratch_dir(prefix: str) -> str:
    """A new folder `<prefix><pid>-xxxx` in the temporary directory, after removing the dead servers' ones."""
    folder = tempfile.gettempdir()
    sweep(folder, prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=folder)


def sweep(folder: str, prefix: str) -> None:
    """Remove the folders in `folder` named `<prefix><pid>-...` whose pid is no longer a process."""
    for name in os.listdir(folder):
        pid = name.removeprefix(prefix).split("-")[0]
        if not name.startswith(prefix) or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except (ProcessLookupError, OverflowError):  # (a number no pid can be: not a server's either way)
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        except PermissionError:
            pass  # alive, someone else's
