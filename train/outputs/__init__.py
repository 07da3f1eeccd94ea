"""What a run writes for people: the metrics log (metrics_log.py), the run report's
plots and summary (run_report.py) and the console's progress lines (progress.py)."""
