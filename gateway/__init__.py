"""Jarvis Gateway: a self-hosted memory gateway for personal AI assistants."""

__version__ = "0.1.0"
