"""ns-accel-bench: method configs, a worker per run, training to a time budget, evaluation, memory, the report."""
