"""Fixtures of the chaos suite: a scratch directory, a CRUD engine, a private cluster."""
from __future__ import annotations

import time
import uuid
from typing import Any, Iterator

import pytest

from tests.chaos import cluster
from tests.chaos.harness import report



@pytest.fixture
def workdir(tmp_path: Any) -> str:
    path = tmp_path / "chaos"
    path.mkdir()
    return str(path)


@pytest.fixture
def crud(make_engine: Any) -> Any:
    """An engine that never polls: used to create jobs and read them back."""
    return make_engine(pool_size=2)


@pytest.fixture(autouse=True)
def _duration(request: Any) -> Iterator[None]:
    started = time.monotonic()
    yield
    report(request.node.name, duration_s=round(time.monotonic() - started, 1))


@pytest.fixture(scope="module")
def private_cluster() -> Iterator[cluster.PrivateCluster]:
    why = cluster.available()
    if why is not None:
        pytest.skip(f"cannot start a private PostgreSQL cluster: {why}")
    pc = cluster.PrivateCluster().start()
    try:
        yield pc
    finally:
        pc.stop()


@pytest.fixture
def private_dsn(private_cluster: cluster.PrivateCluster) -> Iterator[str]:
    """A fresh database with the schema, on the private cluster."""
    from mjsched.backends.postgres import PostgresBackend

    name = f"mjsched_c_{uuid.uuid4().hex[:10]}"
    private_cluster.admin(f'CREATE DATABASE "{name}"')
    backend = PostgresBackend(private_cluster.dsn(name), pool_size=1)
    backend.install()
    backend.close()
    yield private_cluster.dsn(name)
    try:
        private_cluster.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except Exception:  # noqa: BLE001 - the cluster may be gone already
        pass
