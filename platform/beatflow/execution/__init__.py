"""The plumbing of running DAG tasks, below ``runs`` and the worker: the pure node decision
(``decide``) and trigger rules (``rules``), canvas continuation (``canvas``), batched sends
(``send``), task events (``events``), the announcement of a run's end (``announce``), task
options, leases and default dedupe keys (``dedupe``). The worker side itself lives in
``beatflow.worker``."""
