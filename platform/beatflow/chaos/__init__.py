"""`beatflow chaos`: a full local stack (own Redis with AOF, own PostgreSQL, workers, beats, the
exporter; RabbitMQ as the broker with --broker rabbitmq) under a seeded stream of faults, then a
check that nothing was lost or doubled.

servers.py   the Redis and PostgreSQL instances a chaos run owns (stop, restart, wipe)
rabbitmq_server.py  the RabbitMQ node of a run with --broker rabbitmq (kill, restart, alarm)
workload.py  the DAG module and ledger tables the run loads (effects keyed by dedupe key)
stack.py     beatflow processes as children: start, SIGKILL, SIGTERM, SIGSTOP/SIGCONT
faults.py    the fault kinds, each a function of the stack and a seeded random generator
faults_rabbitmq.py  RabbitMQ's fault kinds, and which kinds a run on each broker has
checks.py    the invariants, read from the results database, the ledger and /metrics
runner.py    one run: start, load, inject, drain, check
report.py    what a run reports (text or JSON)"""
