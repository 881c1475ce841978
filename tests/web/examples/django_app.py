"""Example: the dashboard on a route of an existing Django project, behind Django's login
(README "Dashboard", docs/guide/operations.md).

In a real project the ``scheduler`` and ``path`` lines go into ``urls.py``; this file is a
one-file Django project (auth, sessions, an in-memory database) so that the tests can run it.
"""
import os

import django
from django.conf import settings
from django.urls import path

settings.configure(
    DEBUG=False, ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="example-only-not-a-secret",
    INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                "django.middleware.csrf.CsrfViewMiddleware",
                "django.contrib.auth.middleware.AuthenticationMiddleware"],
)
django.setup()

from mjsched.web import create_app  # noqa: E402
from mjsched.web.mounts import django_view  # noqa: E402

scheduler = django_view(create_app(
    os.environ["MJSCHED_DSN"],
    authorize=lambda request: request.user.is_staff and request.user.get_username(),   # Django's users decide
))

urlpatterns = [
    path("scheduler/", scheduler),
    path("scheduler/<path:rest>", scheduler),
]
