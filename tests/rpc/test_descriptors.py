"""A gateway out of file descriptors (issue 29, point 1): requests that need a file answer a
retryable -32050 naming the cause, not a bare -32603, and succeed again once descriptors are free."""

from __future__ import annotations

import contextlib
import errno
import os
import resource

import pytest

from tests.helpers import RpcError


@contextlib.contextmanager
def no_descriptors_left():
    """This process (the gateway runs in it) can open no file: the soft RLIMIT_NOFILE is lowered
    and what is still free below it is taken; both are given back on exit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 4, hard))
    taken = []
    try:
        while True:
            try:
                taken.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as exc:
                assert exc.errno == errno.EMFILE
                break
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
async def test_out_of_descriptors_is_a_retryable_error_naming_the_cause(client):
    key = (await client.call("sessions.create"))["sessionKey"]
    with no_descriptors_left():
        with pytest.raises(RpcError) as created:
            await client.call("sessions.create", {"label": "no descriptors"})
        sent = await client.request("chat.send", {"sessionKey": key, "message": "hello"})
    assert created.value.code == -32050, created.value.message
    assert created.value.data == {"retryable": True, "retryAfterMs": 1000, "errno": "EMFILE"}
    assert "too many files open" in created.value.message
    assert sent["error"]["code"] == -32050 and sent["error"]["data"]["errno"] == "EMFILE"
    # Descriptors free again: the same requests succeed.
    assert (await client.call("sessions.create", {"label": "after"}))["sessionKey"]
    run = await client.call("chat.send", {"sessionKey": key, "message": "hello again"})
    assert (await client.run_to_end(run["runId"]))[-1]["method"] == "chat.final"
