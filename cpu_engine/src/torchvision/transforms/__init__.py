"""torchvision.transforms stand-in: the real InterpolationMode enum, placeholders for the rest."""

from torchvision._standin import unavailable_module_getattr
from torchvision.transforms.functional import InterpolationMode

__all__ = ["InterpolationMode"]

__getattr__ = unavailable_module_getattr(__name__)
