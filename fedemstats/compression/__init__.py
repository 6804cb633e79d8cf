"""Unbiased compressors with exact bit accounting (SPEC §6)."""
from .base import Compressor, Identity, Message
from .spec import make_compressor

__all__ = ["Compressor", "Identity", "Message", "make_compressor"]
