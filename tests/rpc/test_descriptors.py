"""A gateway out of file descriptors (issue 29, point 1): requests that need a file answer a
retryable -32050 naming the cause, not a bare -32603, and succeed again once descriptors are free."""

from __future__ import annotations

import os

import pytest

from tests.helpers import RpcError, descriptors_exhausted


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
async def test_out_of_descriptors_is_a_retryable_error_naming_the_cause(client):
    key = (await client.call("sessions.create"))["sessionKey"]
    with descriptors_exhausted():
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
