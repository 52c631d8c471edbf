"""Talking to the container runtime through CRI v1."""

from shared.cri.client import CRIClient, CRIError
from shared.cri.interface import ImageService, RuntimeService, StreamingService

__all__ = ["CRIClient", "CRIError", "ImageService", "RuntimeService", "StreamingService"]
