"""structlog as a processor chain: JSON lines when not on a TTY (systemd, files), console on a TTY.

Never log tokens or message bodies at info; bind connection and run ids instead.
"""

from __future__ import annotations

import logging
import sys

import structlog
from structlog.tracebacks import ExceptionDictTransformer

_HANDLER = "jarvis"  # the root handler setup() installs (replaced, not added again, by a second setup)
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def setup(level: str = "info", fmt: str = "auto", stream=None) -> None:
    stream = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not stream.isatty())
    shared: list = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    # Tracebacks never carry frame locals: they would hold request params, message text and tokens.
    if use_json:
        rendering: list = [
            structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False)),
            structlog.processors.JSONRenderer(),
        ]
    else:
        rendering = [structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)]
    structlog.configure(
        processors=shared + rendering,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )
    # Libraries that use stdlib logging (uvicorn, websockets' handshake errors, openai) follow the same
    # level and come out in the same shape: a JSON line off a TTY, with their logger's name.
    handler = logging.StreamHandler(stream)
    handler.set_name(_HANDLER)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *rendering],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(_LEVELS[level], logging.WARNING))
