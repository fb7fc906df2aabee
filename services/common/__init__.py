"""Plumbing every Trellis gRPC service shares: serve(), health, logs, metrics, errors, test helper."""

from services.common.config import ServerConfig
from services.common.errors import ServiceError
from services.common.server import Binding, Service, serve

__all__ = ["Binding", "ServerConfig", "Service", "ServiceError", "serve"]
