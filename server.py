"""Tornado Concurrency Lab: the command line (python server.py --help).

BLAS/OpenMP pools are sized when numpy loads, so they are capped before any
import that loads numpy (set OMP_NUM_THREADS etc. yourself to experiment;
/stats and the bench report what was used). Then lab/main.py runs the server
with handlers/app.py's application: parse, bind, fork, serve, stop.
"""

from lab.native import cap_native_threads

cap_native_threads()

from handlers.app import make_app  # noqa: E402 -- imports numpy: must come after the cap
from lab.main import main  # noqa: E402

if __name__ == "__main__":
    main(make_app)
