"""The PostgreSQL engine (`storage.url`): everything several gateways share, in one database.

    db.py        the pool, the schema and its migrations, instance liveness, notifications
    sessions.py  SessionStore: sessions and transcript rows, a local mirror file per transcript
    ledger.py    RunLedger: active runs and idempotency keys
    keyed.py     KeyedStore: keyed memories as rows, the workspace files a mirror

The memory index's PostgreSQL twin is still gateway/memory/pgindex.py and pgmanager.py.
"""

from .db import MIGRATIONS, Postgres, create_database, lock_key, migrate, redact

__all__ = ["MIGRATIONS", "Postgres", "create_database", "lock_key", "migrate", "redact"]
