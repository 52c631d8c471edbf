"""Talking to the container runtime through CRI v1."""

from shared.runtime.cri.client import CRIClient, CRIError
from shared.runtime.cri.interface import ImageService, Runtime, RuntimeService, StreamingService

__all__ = ["CRIClient", "CRIError", "ImageService", "Runtime", "RuntimeService", "StreamingService"]
