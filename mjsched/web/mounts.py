"""Mounting the dashboard inside an existing web application.

Flask (or any WSGI app): Werkzeug's ``DispatcherMiddleware`` routes a path prefix to it::

    from werkzeug.middleware.dispatcher import DispatcherMiddleware
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/scheduler": create_app(DSN)})

Django: a URL route whose view hands the request to the dashboard (:func:`django_view`)::

    path("scheduler/", django_view(dashboard)), path("scheduler/<path:rest>", django_view(dashboard))

Mounted, the dashboard answers local requests only until the application says who may use
it: ``create_app(DSN, authorize=...)``, a callable on the request. Under ``django_view`` it
gets Django's request (``authorize=lambda r: r.user.is_staff and r.user.get_username()``);
under a WSGI mount, the dashboard's Werkzeug request, whose ``environ`` a Flask app can
enter (``with app.request_context(request.environ): ...``) to ask its own login. The
dashboard checks its own CSRF token, so the view is exempt from Django's.
"""
from __future__ import annotations

import io
from http.cookies import SimpleCookie
from typing import Any, Callable

from .security import HOST_REQUEST


def django_view(app: Callable[..., Any]) -> Callable[..., Any]:
    """A Django view that serves ``app`` (a WSGI application) under the route's prefix."""
    from django.http import HttpResponse
    from django.views.decorators.csrf import csrf_exempt

    def view(request: Any, rest: str = "") -> Any:
        path = request.path
        prefix = path[: len(path) - len(rest)].rstrip("/") if rest and path.endswith(rest) else path.rstrip("/")
        environ = dict(request.META)
        environ[HOST_REQUEST] = request          # what authorize= is called with
        environ.update({"SCRIPT_NAME": prefix, "PATH_INFO": "/" + rest, "wsgi.input": io.BytesIO(request.body),
                        "CONTENT_LENGTH": str(len(request.body)), "wsgi.url_scheme": request.scheme})
        started: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started["status"], started["headers"] = status, headers
            return lambda data: None

        chunks = app(environ, start_response)
        try:
            body = b"".join(chunks)
        finally:
            getattr(chunks, "close", lambda: None)()
        response = HttpResponse(body, status=int(started["status"].split(" ", 1)[0]))
        for name, value in started["headers"]:
            if name.lower() == "set-cookie":
                response.cookies.load(SimpleCookie(value))   # several Set-Cookie headers each keep theirs
            else:
                response[name] = value
        return response

    return csrf_exempt(view)
