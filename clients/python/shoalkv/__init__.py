"""shoalkv: a pure-Python client of the Shoal key-value store's native
protocol, sync (:class:`Client`) and asyncio (:class:`AsyncClient`)."""
from . import errors
from .aio import AsyncClient, AsyncPipeline
from .client import Client, ConnectionPool, Pipeline, tls_context
from .errors import *  # noqa: F401,F403
from .hashing import key_hash, key_slot
from .protocol import IncrementResult, Object, Page, ReadResult, RejectRules, RemoveItem, Ttl, WriteItem
from .routing import TabletMap

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "AsyncPipeline", "Client", "ConnectionPool", "Pipeline", "tls_context", "errors",
    "key_hash", "key_slot", "IncrementResult", "Object", "Page", "ReadResult", "RejectRules",
    "RemoveItem", "Ttl", "WriteItem", "TabletMap", "__version__",
] + [n for n in errors.__dict__ if isinstance(errors.__dict__[n], type) and issubclass(errors.__dict__[n], Exception)]
