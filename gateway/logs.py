"""structlog as a processor chain: JSON lines when not on a TTY (systemd, files), console on a TTY.

Never log tokens or message bodies at info; bind connection and run ids instead.
"""

from __future__ import annotations

import logging
import sys

import structlog
from structlog.tracebacks import ExceptionDictTransformer

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def setup(level: str = "info", fmt: str = "auto", stream=None) -> None:
    stream = stream or sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not stream.isatty())
    processors: list = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    # Tracebacks never carry frame locals: they would hold request params, message text and tokens.
    if use_json:
        processors += [
            structlog.processors.ExceptionRenderer(ExceptionDictTransformer(show_locals=False)),
            structlog.processors.JSONRenderer(),
        ]
    else:
        processors += [structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )
    # Libraries that use stdlib logging (websockets' handshake errors, openai) follow the same level.
    logging.basicConfig(
        level=max(_LEVELS[level], logging.WARNING), stream=stream, format="%(name)s %(levelname)s %(message)s"
    )
