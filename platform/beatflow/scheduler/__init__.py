"""The HA beat: RedBeat's scheduler subclassed so every replica competes for a token-checked
lease renewed from its own thread while its tick loop makes progress, and only the leader writes
schedule entries and fires ticks (DAG runs it creates are fenced by its epoch in the results DB's
``beat_terms`` row; its Redis writes check the lock token and ``beatflow:beat:epoch``).

Redis keys (named in ``beatflow.keys``; for the exporter and operators; values are UTF-8 strings):

=====================================  ======  ===============================================
key                                    type    value
=====================================  ======  ===============================================
``beatflow:redbeat::lock``             string  the leader's random token; PX = beat_lock_timeout
``beatflow:beat:epoch``                string  leader epoch: INCR on every lock acquisition
``beatflow:beat:leader``               string  JSON ``{"instance", "epoch", "since"}`` (since:
                                               unix seconds); same TTL as the lock, so it
                                               vanishes when no leader holds the lock
``beatflow:beat:replica:<instance>``   string  JSON ``{"instance", "host", "pid", "role",
                                               "epoch", "seen", "loop_seen", "stall_timeout"}``
                                               (loop_seen: the tick loop's last completed
                                               pass); PX = 3 x lock timeout
``beatflow:redbeat::schedule``         zset    member: entry key; score: unix time the entry
                                               is next due (RedBeat's layout)
``beatflow:redbeat:dag:<dag_id>``      hash    ``definition``: RedBeat's entry JSON (a disabled
                                               ``beatflow.fire_schedule``); ``beatflow``: JSON
                                               schedule spec (what the beat fires from)
``beatflow:redbeat:<name>``            hash    a plain periodic task: RedBeat's ``definition``
                                               and ``meta`` (saved by users, or declared in
                                               ``beat_schedule``); same schedule zset
``beatflow:redbeat::statics``          set     names of the declared (beat_schedule) entries
``beatflow:redbeat::fingerprints``     hash    dag_id -> fingerprint of the synced spec
``beatflow:beat:watermark``            hash    dag_id -> ISO-8601 UTC tick fired last
=====================================  ======  ===============================================
"""
