"""Placeholders for torchvision names: importable, constructible at module level, unusable."""


class _Unavailable:
    """Stands for a torchvision class or function; calling an instance raises."""

    _qualname = "torchvision"

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            f"{self._qualname} is unavailable: this engine venv carries an import-only "
            "torchvision stand-in (eagle3scope-cpu-engine); image processing is not supported"
        )


def placeholder(qualname: str) -> type:
    """A class named after `qualname`; subclassable, instantiable, its instances raise when called."""
    return type(qualname.rsplit(".", 1)[-1], (_Unavailable,), {"_qualname": qualname})


def unavailable_module_getattr(module_name: str):
    """PEP 562 module __getattr__: any unknown public name becomes a placeholder."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return placeholder(f"{module_name}.{name}")

    return __getattr__
