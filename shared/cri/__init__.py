"""Talking to the container runtime through CRI v1."""

from shared.cri.client import CRIClient, CRIError
from shared.cri.interface import ImageService, Runtime, RuntimeService, StreamingService

__all__ = ["CRIClient", "CRIError", "ImageService", "Runtime", "RuntimeService", "StreamingService"]
