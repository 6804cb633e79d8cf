"""Unbiased compressors with exact bit accounting (SPEC §6)."""
from .base import Compressor, Identity, Message
from .block_p import BlockP
from .dithering import RandomDithering
from .sparsify import RandK
from .spec import REGISTRY, make_compressor
from .streams import ClientStreams

__all__ = [
    "Compressor", "Identity", "Message", "RandomDithering", "BlockP", "RandK",
    "make_compressor", "REGISTRY", "ClientStreams",
]
