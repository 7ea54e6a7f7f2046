"""The bench's PNG charts (matplotlib, Agg, loaded lazily): a race's timeline, a sweep's heatmaps, scale's
lines (figures.py), and the load tools' charts (load.py)."""
