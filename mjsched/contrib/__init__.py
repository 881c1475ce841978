"""Optional integrations with other systems (each imports its system lazily or on import).

  celery.py  import a Celery beat_schedule as jobs; the worker-side duplicate guard

May import: the core (models, errors, drivers); never the CLI or the dashboard.
"""
