"""Example: the dashboard under /scheduler of an existing Flask app (README "Dashboard")."""
import os

from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from mjsched.web import create_app

app = Flask(__name__)


@app.route("/")
def home() -> str:
    return "the legacy app"


app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {  # type: ignore[method-assign]
    "/scheduler": create_app(os.environ["MJSCHED_DSN"]),
})
