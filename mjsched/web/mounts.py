"""Mounting the dashboard inside an existing web application.

Flask (or any WSGI app): Werkzeug's ``DispatcherMiddleware`` routes a path prefix to it::

    from werkzeug.middleware.dispatcher import DispatcherMiddleware
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/scheduler": create_app(DSN)})

Django: a URL route whose view hands the request to the dashboard (:func:`django_view`)::

    path("scheduler/", django_view(dashboard)), path("scheduler/<path:rest>", django_view(dashboard))

Wrap the view in ``staff_member_required`` (or any decorator) to put Django's own login in
front. The dashboard checks its own CSRF token, so the view is exempt from Django's.
"""
from __future__ import annotations

import io
from http.cookies import SimpleCookie
from typing import Any, Callable


def django_view(app: Callable[..., Any]) -> Callable[..., Any]:
    """A Django view that serves ``app`` (a WSGI application) under the route's prefix."""
    from django.http import HttpResponse
    from django.views.decorators.csrf import csrf_exempt

    def view(request: Any, rest: str = "") -> Any:
        path = request.path
        prefix = path[: len(path) - len(rest)].rstrip("/") if rest and path.endswith(rest) else path.rstrip("/")
        environ = dict(request.META)
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
