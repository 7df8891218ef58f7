"""A Flower ``Grid`` in this process: the ServerApp's messages reach the ClientApp as they would
through a SuperLink and SuperNodes, without their processes.

Every message and every reply is serialised to Flower's protobuf and back (what the SuperLink
stores and forwards), and every ClientApp call gets a fresh ``Context`` with an empty ``state`` and
the node's own ``node_config`` (a SuperNode starts a fresh ClientApp process per message): the
site's state lives only in its state directory. ``tamper(node_id, message) -> message | None``
may alter or drop a message on its way (a malicious or faulty coordinator); ``extra`` lists
``(node_id, message)`` to deliver after a batch (a replay).
"""

from __future__ import annotations

import itertools

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.serde import message_from_proto, message_to_proto
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity


def _wire(msg: Message) -> Message:
    out = message_from_proto(message_to_proto(msg))
    return out


class LoopbackGrid(Grid):
    def __init__(self, nodes: dict, run_id: int = 7, tamper=None, client_app=None, run_config=None):
        from bnsl_cli.net.flower.app import client_app as default_app

        self.nodes = dict(nodes)
        self.run_id = int(run_id)
        self.client_app = client_app or default_app
        self.tamper = tamper
        self.run_config = dict(run_config or {"options": "ignored by the sites"})
        self.sent: list = []  # (node id, message) of every request delivered
        self.replies: list = []  # every reply, as it came back
        self.calls = 0
        self._ids = itertools.count(1)
        self._replies: dict = {}
        TaskIdentity.run_id = self.run_id
        TaskIdentity.node_id = 0
        TaskIdentity.task_id = 1

    # -- the Grid interface -------------------------------------------------------------------
    def set_run(self, run) -> None:  # pragma: no cover - not used in process
        pass

    @property
    def run(self):  # pragma: no cover
        return None

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # pragma: no cover
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self):
        return list(self.nodes)

    def push_messages(self, messages):
        """Deliver each message at once (tampered with first, if so set); its reply waits to be pulled."""
        ids = []
        for msg in self._tampered(messages):
            reply = self.deliver(msg)
            ids.append(msg.metadata.message_id)
            if reply is not None:
                self._replies[msg.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids):
        return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

    def deliver(self, msg: Message) -> Message:
        """One message to its node's ClientApp (a fresh Context), its reply as it comes back."""
        msg.metadata.__dict__["_message_id"] = f"m{next(self._ids)}"
        nid = int(msg.metadata.dst_node_id)
        self.sent.append((nid, msg))
        self.calls += 1
        wire = _wire(msg)
        try:
            reply = self.client_app(wire, self._context(nid))
        except Exception as exc:  # noqa: BLE001 - what the SuperNode does: an error reply
            reply = Message(Error(code=0, reason=f"{type(exc).__name__}: {exc}"), reply_to=wire)
        reply = _wire(reply)
        self.replies.append(reply)
        return reply

    def _context(self, nid: int) -> Context:
        """A fresh ClientApp context of node ``nid`` (an empty state: a new process)."""
        return Context(run_id=self.run_id, node_id=nid, node_config=dict(self.nodes[nid]), state=RecordDict(),
                       run_config=dict(self.run_config))

    def send_and_receive(self, messages, *, timeout=None):
        return [self.deliver(msg) for msg in self._tampered(messages)]

    def _tampered(self, messages):
        """The messages as the tamper hook leaves them (``None`` from it drops one)."""
        for msg in messages:
            if self.tamper is not None:
                msg = self.tamper(int(msg.metadata.dst_node_id), msg)
                if msg is None:
                    continue
            yield msg
