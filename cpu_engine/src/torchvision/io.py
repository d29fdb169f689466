"""torchvision.io stand-in."""

from torchvision._standin import unavailable_module_getattr

__getattr__ = unavailable_module_getattr(__name__)
