"""A Celery project as its team wrote it, with beatflow added by ``init_app`` (proj/celery.py)."""
