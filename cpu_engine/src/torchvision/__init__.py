"""Import-level stand-in for torchvision in the CPU engine venv.

The index's torchvision wheels are built against CUDA torch; with the CPU build
of torch 2.13 they fail at import (``operator torchvision::nms does not
exist``). SGLang and transformers import torchvision at module level for image
processors that a text-only Llama + EAGLE-3 engine never runs. This package
satisfies those imports: the names exist, and using any of them raises.
"""

from torchvision._standin import unavailable_module_getattr

__version__ = "0.0.0+eagle3scope.standin"

__getattr__ = unavailable_module_getattr(__name__)
