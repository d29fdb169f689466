"""torchvision.transforms.functional stand-in."""

from enum import Enum

from torchvision._standin import unavailable_module_getattr


class InterpolationMode(Enum):
    """Same members and values as torchvision's (transformers maps PIL resampling onto them at import)."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


__getattr__ = unavailable_module_getattr(__name__)
