"""Shared set-up of the whole suite."""

import signal

# A shell that starts the suite in the background (``pytest … &``, some CI runners) leaves SIGINT
# ignored, and an ignored signal stays ignored in every child process: the Ctrl-C tests' ``bnsl``
# processes would then never see their SIGINT. Handled here, it is reset to the default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# The test log carries no warning of the project's own (issue 29): a test that causes one asserts it
# (pytest.warns) or, where it is true and beside the point, says so with a filter. A warning of a class
# from bnsl_cli.errors, or any warning raised in bnsl_cli's code (a numpy RuntimeWarning there), that
# reaches the log fails the run, listed at its end.
_PROJECT_WARNINGS: list = []


def pytest_warning_recorded(warning_message, when, nodeid, location):
    import os

    category = warning_message.category
    inside = f"{os.sep}bnsl_cli{os.sep}" in str(warning_message.filename)
    if getattr(category, "__module__", "") == "bnsl_cli.errors" or inside:
        text = str(warning_message.message).splitlines()[0][:140]
        _PROJECT_WARNINGS.append(f"{nodeid or when}: {category.__name__}: {text}")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _PROJECT_WARNINGS:
        terminalreporter.write_sep("=", f"{len(_PROJECT_WARNINGS)} warning(s) of bnsl's own reached the test log "
                                   "(assert them with pytest.warns, or filter them where they are true)")
        for line in _PROJECT_WARNINGS[:50]:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus):
    if _PROJECT_WARNINGS and exitstatus == 0:
        session.exitstatus = 1
