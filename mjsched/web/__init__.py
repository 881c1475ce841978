"""A web dashboard for operators (extra ``mjsched[web]``: Werkzeug and Jinja2).

``create_app(dsn_or_engine, *, read_only=False, auth=None, authorize=None)`` returns a WSGI
application to mount in a Flask or Django app (local requests only until ``authorize=``
lets the application's login decide) or to serve alone (``mjsched dashboard``). The
library's core never imports this package.
"""
from .app import Dashboard, create_app
from .security import BasicAuth, TokenAuth, auth_from_env
from .server import DashboardThread, make_dashboard_server, serve

__all__ = ["BasicAuth", "Dashboard", "DashboardThread", "TokenAuth", "auth_from_env", "create_app",
           "make_dashboard_server", "serve"]
