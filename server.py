"""Tornado Concurrency Lab: the command line (python server.py --help).

BLAS/OpenMP pools are sized when numpy loads, so they are capped before any
import that loads numpy (set OMP_NUM_THREADS etc. yourself to experiment;
/stats and the bench report what was used). Then lab/serve/main.py runs the server
with handlers/app.py's application: parse, bind, fork, serve, stop.

The imports sit under __main__ so that the processes pools spawn (they run
this file again as __mp_main__) do not load the web stack they never use.
"""

from lab.instruments.freethreading import watch_gil
from lab.native import cap_native_threads

if __name__ == "__main__":
    watch_gil()  # before any C extension is imported: one may turn a free-threaded build's GIL back on
    cap_native_threads()
    from handlers.app import make_app
    from lab.serve.main import main

    main(make_app)
