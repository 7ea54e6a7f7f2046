"""The lab server's machinery: config, pools, processes, stats, the app factory."""
