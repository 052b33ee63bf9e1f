"""Fixtures: a real Ceph RGW per test session, a fresh bucket per test, moto + fault proxy."""

from __future__ import annotations

import os
import uuid

import pytest

from s3servers import RGW_INSTALL, CephRGW, FaultProxy, free_port, missing_rgw_binaries


@pytest.fixture(scope="session")
def rgw():
    missing = missing_rgw_binaries()
    if missing:
        pytest.skip(f"Ceph RGW not installed (missing {', '.join(missing)}): {RGW_INSTALL}")
    server = CephRGW().start()
    # The store takes credentials from boto3's standard chain, as in production: the env.
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                            "AWS_DEFAULT_REGION")}
    os.environ.update({k: server.env[k] for k in saved})
    try:
        yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


@pytest.fixture
def bucket(rgw):
    """A new, empty bucket on the RGW for one test."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    rgw.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def moto_server():
    """moto's S3 server on loopback: stands in for S3 only where faults are injected."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield port
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def fault_proxy(moto_server):
    proxy = FaultProxy(upstream_port=moto_server).start()
    yield proxy
    proxy.stop()
