"""The permutation measures against its frame's ceiling: payload over everything the host's
shaper counts per data packet, its share of the SACKs it sends for the flow it receives
included."""

from types import SimpleNamespace

import pytest

from endpoints.protocol import wire
from endpoints.protocol.config import TransportConfig
from experiments.scenarios.permutation import ceiling


def test_ceiling_counts_headers_encapsulation_and_sacks():
    # 4 KB payload in 4206-byte frames, + 40 outer, + a 146-byte encapsulated SACK every 4.
    assert wire.payload_ceiling(4096, 4) == pytest.approx(4096 / (4206 + 40 + 146 / 4))
    assert wire.payload_ceiling(4096, 4, encapsulated=False) == pytest.approx(4096 / (4206 + 106 / 4))
    assert wire.payload_ceiling(4096, 1) < wire.payload_ceiling(4096, 4) < 4096 / 4246
    assert wire.payload_ceiling(1024, 4) < wire.payload_ceiling(4096, 4)


def test_agent_transports_report_their_ceiling_kernel_ones_do_not():
    bed = SimpleNamespace(transport=TransportConfig())
    mrc, roce = ceiling(bed, "mrc", 0.94), ceiling(bed, "roce", 0.94)
    assert mrc["payload_ceiling"] == round(wire.payload_ceiling(4096, 4), 4)
    assert roce["payload_ceiling"] > mrc["payload_ceiling"]  # no outer header
    assert mrc["throughput_of_ceiling"] == round(0.94 / mrc["payload_ceiling"], 3)
    assert ceiling(bed, "tcp", 0.94) == {} and ceiling(bed, "mptcp", 0.94) == {}
    small = SimpleNamespace(transport=TransportConfig(mtu_payload=1024, sack_every=2))
    assert ceiling(small, "mrc", 0.5)["payload_ceiling"] == round(wire.payload_ceiling(1024, 2), 4)
