"""Placeholders for torchvision names: importable, subclassable, and raising when called or instantiated."""


class _Unavailable(type):
    """Metaclass of the placeholders: calling one (function call or instantiation) raises."""

    def __call__(cls, *args, **kwargs):
        raise RuntimeError(
            f"{cls.__qualname__} is unavailable: this engine venv carries an import-only "
            "torchvision stand-in (eagle3scope-cpu-engine); image processing is not supported"
        )


def placeholder(qualname: str) -> type:
    """A stand-in for the torchvision class or function named `qualname`."""
    return _Unavailable(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname})


def unavailable_module_getattr(module_name: str):
    """PEP 562 module __getattr__: any unknown public name becomes a placeholder."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{module_name}.{name}")

    return __getattr__
