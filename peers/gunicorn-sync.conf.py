"""gunicorn, sync workers: N processes, one request each at a time (`gunicorn -c peers/gunicorn-sync.conf.py`).

Started from the project root; `--bind 127.0.0.1:0` picks a free port (bench/compare.py), command-line
flags override what is set here (`-w 4`).
"""

wsgi_app = "peers.app:application"
bind = "127.0.0.1:8002"
worker_class = "sync"
workers = 2
# A listen queue like the lab's; a request running over 60 s gets its worker killed (the lab's --job-timeout).
backlog = 1024
timeout = 60
# BLAS and OpenMP capped at one thread, as in the lab.
raw_env = ["OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "MKL_NUM_THREADS=1", "BLIS_NUM_THREADS=1"]
# No per-user control socket (~/.gunicorn/gunicorn.ctl): two gunicorns at once would share it.
control_socket_disable = True
