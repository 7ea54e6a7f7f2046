"""The peers: the lab's workloads behind uWSGI and gunicorn (app.py, and their configurations as files)."""
