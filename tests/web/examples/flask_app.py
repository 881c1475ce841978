"""Example: the dashboard under /scheduler of an existing Flask app, behind the app's own login
(README "Dashboard", docs/guide/operations.md)."""
import os

from flask import Flask, abort, redirect, request, session
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from mjsched.web import create_app

app = Flask(__name__)
app.secret_key = os.environ["FLASK_SECRET_KEY"]
OPERATORS = {"ops"}


@app.route("/")
def home() -> str:
    return "the legacy app"


@app.get("/login")
def login_form() -> str:
    return ('<form method="post" action="/login"><input name="user"><input name="password" type="password">'
            '<button type="submit">Sign in</button></form>')


@app.post("/login")
def login():  # type: ignore[no-untyped-def]  # stands in for the application's real login
    if request.form.get("password") != os.environ["EXAMPLE_PASSWORD"]:
        abort(403)
    session["user"] = request.form.get("user", "")
    return redirect("/scheduler/jobs")


def may_use_the_scheduler(dashboard_request):  # type: ignore[no-untyped-def]
    """authorize=: the application's session decides (with Flask-Login: current_user)."""
    with app.request_context(dashboard_request.environ):
        user = session.get("user")
        return user if user in OPERATORS else False


app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {  # type: ignore[method-assign]
    "/scheduler": create_app(os.environ["MJSCHED_DSN"], authorize=may_use_the_scheduler),
})
