"""The embedded dev stack behind `beatflow dev`: a local Redis, a SQLite results DB under
``.beatflow/``, and a worker, two beats, Flower and the exporter as supervised child processes."""
