"""``render`` writes addresses as ``launch`` does: ``localhost`` as ``127.0.0.1`` (tensorflow#19900)."""

from __future__ import annotations

import json

from orchestrator.backends import local
from orchestrator.cli import render
from orchestrator.spec import address
from orchestrator.spec.loader import build_spec
from orchestrator.spec.model import TaskId


def test_render_writes_localhost_as_the_ipv4_literal_like_launch():
    spec = build_spec({"addresses": {"chief": "localhost:2221", "worker": ["LOCALHOST.:2222", "127.0.0.1:2223"]}})
    addresses = render.addresses_for(spec, None, None)
    assert addresses == {TaskId("chief", 0): "127.0.0.1:2221", TaskId("worker", 0): "127.0.0.1:2222",
                         TaskId("worker", 1): "127.0.0.1:2223"}
    for fmt in ("json", "env", "tf-config"):
        assert "localhost" not in render.render(spec, addresses, fmt).lower()
    assert json.loads(render.render(spec, addresses, "json"))["cluster"]["chief"] == ["127.0.0.1:2221"]
    hosts = render.addresses_for(build_spec({"workers": 2}), ["localhost"], 4000)
    assert list(hosts.values()) == ["127.0.0.1:4000", "127.0.0.1:4001"]


def test_launch_and_render_share_one_rewrite_rule():
    assert local.localhost_as_ipv4 is render.localhost_as_ipv4 is address.localhost_as_ipv4
    assert address.localhost_as_ipv4("localhost:2222") == "127.0.0.1:2222"
    assert address.localhost_as_ipv4("worker-1.example:2222") == "worker-1.example:2222"
    assert address.localhost_as_ipv4(address.parse_address("[::1]:2222", "a")) == "[::1]:2222"
