"""The HA beat: RedBeat's scheduler subclassed so every replica competes for a token-checked
lease renewed from its own thread, and only the leader writes schedule entries and fires ticks.

Redis keys (for the exporter and operators; all values are UTF-8 strings):

=====================================  ======  ===============================================
key                                    type    value
=====================================  ======  ===============================================
``beatflow:redbeat::lock``             string  the leader's random token; PX = beat_lock_timeout
``beatflow:beat:epoch``                string  leader epoch: INCR on every lock acquisition
``beatflow:beat:leader``               string  JSON ``{"instance", "epoch", "since"}`` (since:
                                               unix seconds); same TTL as the lock, so it
                                               vanishes when no leader holds the lock
``beatflow:beat:replica:<instance>``   string  JSON ``{"instance", "role": "leader"|"follower",
                                               "epoch", "seen"}``; PX = 3 x lock timeout
``beatflow:redbeat::schedule``         zset    member: entry key; score: unix time the entry
                                               is next due (RedBeat's layout)
``beatflow:redbeat:dag:<dag_id>``      hash    field ``definition``: JSON schedule spec
``beatflow:redbeat::fingerprints``     hash    dag_id -> fingerprint of the synced spec
``beatflow:beat:watermark``            hash    dag_id -> ISO-8601 UTC tick fired last
=====================================  ======  ===============================================
"""
