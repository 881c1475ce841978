"""Example: the dashboard on a route of an existing Django project (README "Dashboard").

In a real project the two ``path`` lines go into ``urls.py``; this file is a one-file
Django project so that the tests can run it.
"""
import os

import django
from django.conf import settings
from django.urls import path

settings.configure(
    DEBUG=False, ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="example-only-not-a-secret",
    MIDDLEWARE=["django.middleware.csrf.CsrfViewMiddleware"],
)
django.setup()

from mjsched.web import create_app  # noqa: E402
from mjsched.web.mounts import django_view  # noqa: E402

scheduler = django_view(create_app(os.environ["MJSCHED_DSN"]))

urlpatterns = [
    path("scheduler/", scheduler),
    path("scheduler/<path:rest>", scheduler),
]
