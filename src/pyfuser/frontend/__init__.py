"""The nvFuser-compatible frontend: FusionDefinition, Fusion, fd.ops, the printer."""
from .definition import Fusion, FusionDefinition

__all__ = ["Fusion", "FusionDefinition"]
