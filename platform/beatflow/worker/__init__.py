"""The worker side: what a worker process runs for each message. ``tasks`` registers the
tasks; ``node`` is the node wrapper, a short sequence of the pure decision's actions
(``execution/decide.py``) over ``claim``, ``attempt``, ``mapping``, ``closing`` and
``letters``; ``skew`` handles messages from another version of the dags folder;
``log_capture`` keeps task logs. It sits above ``runs`` (closing a run is ``runs.close``'s)
and below the composition root."""
