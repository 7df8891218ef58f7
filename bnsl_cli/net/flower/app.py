"""The Flower app: ``server_app`` (a ``ServerApp``) and ``client_app`` (a ``ClientApp``).

Flower loads them by name (``[tool.flwr.app.components]`` of the app's ``pyproject.toml``,
``examples/flower/pyproject.toml``)::

    serverapp = "bnsl_cli.net.flower.app:server_app"
    clientapp = "bnsl_cli.net.flower.app:client_app"

Importing this module imports ``flwr`` (the optional extra); nothing else in bnsl imports it.
The ServerApp is :func:`bnsl_cli.net.flower.server.coordinate`; the ClientApp answers each
``query.bnsl`` message with :func:`bnsl_cli.net.flower.site.answer`, the site being the SuperNode's
own node configuration (never the run configuration).
"""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.common.logger import log as _flwr_log
from flwr.serverapp import Grid, ServerApp

from bnsl_cli.net.flower import envelope as E

__all__ = ["client_app", "server_app"]

server_app = ServerApp()
client_app = ClientApp()


def _info(text: str) -> None:
    import logging

    _flwr_log(logging.INFO, "bnsl: %s", text)


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    import numpy as np

    from bnsl_cli.net.flower.server import coordinate

    from bnsl_cli.errors import BnslError

    np.seterr(over="ignore", invalid="ignore", divide="ignore")
    try:
        result = coordinate(grid, context.run_config, log=_info)
    except BnslError as exc:  # a site that stopped, a refused plan, a bad option: one line, no traceback
        import logging

        # logged and returned (an exception would add Flower's traceback, and an exit could cut the log
        # stream before this line reaches `flwr run`); the run folder is not written
        _flwr_log(logging.ERROR, "bnsl: error: %s", " ".join(str(exc).split()))
        return
    rep = result.report
    _info(f"{rep.get('method_label', rep['method'])}: {rep.get('rounds')} rounds, {int((result.W != 0).sum())} edges"
          + (f"; run folder {context.run_config.get('out')}" if context.run_config.get("out") else ""))


@client_app.query("bnsl")
def _query(msg: Message, context: Context) -> Message:
    import numpy as np

    from bnsl_cli.net.flower.site import answer

    np.seterr(over="ignore", invalid="ignore", divide="ignore")
    frames = answer(msg.content, context.run_id, context.node_config)
    return Message(E.reply_content(frames), reply_to=msg)
