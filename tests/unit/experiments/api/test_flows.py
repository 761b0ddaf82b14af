"""A collective's step posts to and asks every QP with one request per agent (flows.write_all,
flows.completed_all), whatever the order of the flows; agents stood in for by recorders."""

from __future__ import annotations

from experiments.api.flows import AgentFlow, completed_all, write_all


class Recorder:
    """An agent that answers write_many with MSNs 10, 11, ... and progress_many with qpn * 2."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def call(self, cmd: str, **fields: object) -> dict:
        self.calls.append((cmd, fields))
        if cmd == "write_many":
            return {"msns": [10 + i for i in range(len(fields["qpns"]))]}  # type: ignore[arg-type]
        if cmd == "progress_many":
            return {"progress": [{"qpn": q, "messages": q * 2} for q in fields["qpns"]]}  # type: ignore[union-attr]
        return {}


def _flow(agents: dict, src: str, dst: str, qpn: int) -> AgentFlow:
    flow = object.__new__(AgentFlow)  # no open: the recorder is not an agent
    flow.agents, flow.src, flow.dst, flow.qpn = agents, src, dst, qpn
    return flow


def test_one_request_per_agent_and_each_answer_back_in_the_flows_order():
    agents = {h: Recorder() for h in ("h0", "h1", "h2")}
    flows = [_flow(agents, "h0", "h1", 1), _flow(agents, "h1", "h2", 2), _flow(agents, "h0", "h2", 3),
             _flow(agents, "h2", "h0", 4), _flow(agents, "h0", "h1", 5)]
    assert write_all(flows, [100, 200, 300, 400, 500]) == [10, 10, 11, 10, 12]
    assert agents["h0"].calls == [("write_many", {"qpns": [1, 3, 5], "sizes": [100, 300, 500]})]
    assert [len(a.calls) for a in agents.values()] == [1, 1, 1]
    assert completed_all(flows) == [2, 4, 6, 8, 10]
    assert agents["h2"].calls[-1] == ("progress_many", {"qpns": [2, 3]})  # h2 receives 2 and 3
    assert [len(a.calls) for a in agents.values()] == [2, 2, 2]
