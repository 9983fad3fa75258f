"""Running DAG tasks on workers: the node wrapper, trigger rules, leases, the Celery tasks."""
