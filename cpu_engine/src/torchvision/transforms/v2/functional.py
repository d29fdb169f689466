"""torchvision.transforms.v2.functional stand-in."""

from torchvision._standin import unavailable_module_getattr

__getattr__ = unavailable_module_getattr(__name__)
